// Package tree is the approximate radix tree behind the cache_aware policy (SPEC §1.3): a guess,
// kept by the router alone, of which prompt prefixes each target (tenant) holds in its KV cache.
//
// Texts are keyed by Unicode characters (runes), not bytes and not tokens, and every length and
// count is in runes. Invalid UTF-8 is accepted: each invalid byte is one rune, as in a range
// loop, equal only to the same invalid byte (not to U+FFFD).
//
// Each node holds an edge label and the set of tenants whose inserted texts pass through it,
// each with the logical time of its last Insert there. Insert stamps the whole path;
// PrefixMatch finds the longest stored prefix and the tenants on the node where matching
// stopped; Evict trims least-recently-used leaves, per tenant (sgl-router's max_tree_size
// meaning: a budget per target) and for the whole tree (a memory bound). A tenant's count is
// the sum of the edge lengths of the nodes carrying it, so shared prefixes count once per
// tenant, and TotalChars counts each edge once.
//
// Time: recency is a logical counter bumped by each Insert, never the wall clock, so the order
// of eviction is exact LRU and the same operations give the same tree in the live router and
// in the simulator. The caller decides when to Evict (from its injected clock).
//
// A Tree is not safe for concurrent use: the router calls it under its policy mutex.
package tree
