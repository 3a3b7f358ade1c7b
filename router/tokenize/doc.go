// Package tokenize is the router's token view of a request: a byte-level BPE tokenizer read
// from a Hugging Face tokenizer.json (exact, as the model's own tokenizer encodes) and
// chat-template rendering (Jinja, from tokenizer_config.json or a --chat-template file), so the
// router computes the same token ids — and so the same KV block hashes — as the SGLang worker.
// Pure: no I/O beyond loading the files it is pointed at.
package tokenize
