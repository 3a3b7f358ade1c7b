package tree_test

import (
	"fmt"

	"github.com/pdrouter/pdrouter/router/tree"
)

func Example() {
	tr := tree.New()
	tr.Insert("", "worker-a") // register both targets
	tr.Insert("", "worker-b")
	tr.Insert("You are a helpful assistant. Hi!", "worker-a")
	tr.Insert("You are a helpful assistant. Bye!", "worker-b")

	matched, tenants := tr.PrefixMatch("You are a helpful assistant. Hello", nil)
	fmt.Println(matched, tenants)

	matched, tenants = tr.PrefixMatch("You are a pirate.", nil)
	fmt.Println(matched, tenants)

	fmt.Println(tr.TenantCounts(), tr.TotalChars())

	// Keep at most 30 runes per target: each loses its own leaf, the shared prefix stays.
	fmt.Println(tr.Evict(30, 0), tr.TenantCounts())
	// Output:
	// 30 [worker-a]
	// 10 [worker-a worker-b]
	// map[worker-a:32 worker-b:33] 36
	// 7 map[worker-a:29 worker-b:29]
}
