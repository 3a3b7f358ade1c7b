package wire_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"

	"github.com/pdrouter/pdrouter/router/wire"
)

// The SPEC §1.4 wire example: chat, no DP, `--prefill http://10.0.0.1:30001 none`.
func ExampleBody_PD() {
	body, err := wire.Parse(wire.Chat, []byte(`{"model":"m","messages":[{"role":"user","content":"hi"}],"x_custom":{"keep":1}}`))
	if err != nil {
		panic(err)
	}
	ids := wire.NewIDGen(rand.New(rand.NewPCG(1, 2)), "10.0.0.7")
	legs := body.PD(ids, wire.PDOptions{Host: wire.BootstrapHost("http://10.0.0.1:30001")})
	fmt.Println(body.Text)
	fmt.Println(string(bytes.Join(legs.Prefill, nil)))
	fmt.Println(string(bytes.Join(legs.Decode, nil)))
	// Output:
	// hi
	// {"model":"m","messages":[{"role":"user","content":"hi"}],"x_custom":{"keep":1},"rid":"chatcmpl-vmwxOCebILpb6HYwtfEUDnMB-10.0.0.7","bootstrap_host":"10.0.0.1","bootstrap_port":null,"bootstrap_room":6158782141916471494}
	// {"model":"m","messages":[{"role":"user","content":"hi"}],"x_custom":{"keep":1},"rid":"chatcmpl-vmwxOCebILpb6HYwtfEUDnMB-10.0.0.7","bootstrap_host":"10.0.0.1","bootstrap_port":null,"bootstrap_room":6158782141916471494,"data_parallel_rank":null,"data_parallel_rank_decode":null}
}

func ExampleParser() {
	var p wire.Parser
	for _, chunk := range []string{"data: {\"a\":", "1}\n\nda", "ta: [DONE]\n\n"} {
		p.Feed([]byte(chunk))
		for ev, ok := p.Next(); ok; ev, ok = p.Next() {
			fmt.Printf("%s done=%v\n", ev.Data, ev.IsDone())
		}
	}
	// Output:
	// {"a":1} done=false
	// [DONE] done=true
}
