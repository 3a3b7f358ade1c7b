// Package validate runs the published-results suite (issue 25): each file of published/ is
// one public measurement of a real SGLang deployment (format: published/README.md). For every
// load level of a set the simulator runs the same setup — model on GPU at the set's
// parallelism (engine.Build), SGLang's server arguments, the same workload and load — and
// computes the same figures; each figure is compared as simulated ÷ published against its
// band (Bands). `router sim validate` prints the table and `make test` fails outside the bands.
//
// Three kinds of level:
//
//   - serving levels (load has request_rate, concurrency or num_prompts) run through sim.Run:
//     one regular server for a unified set, the PD layout of the set's pd object otherwise;
//     ShareGPT sets use the generated sharegpt workload (workloads/sharegpt.go), random sets
//     the random workload with the set's range ratio;
//   - prefill phase levels (LMSYS large-scale EP blogs: prefill measured alone at
//     saturation) drive one server of the prefill pool directly (sim/engine), every DP rank
//     kept full, and measure prompt tokens per second in steady state;
//   - decode phase levels put batch_size_per_device requests on every rank of one decode
//     server, their KV arriving at once with kv_cache_len tokens of context, and measure
//     output tokens per second.
//
// A set whose model or GPU the engine's catalogs lack, or whose layout the simulator cannot
// express, gives one row per figure saying so ("not expressible yet: …"): it fails the gate
// like a figure outside its band, it is never dropped.
//
// # Adding a set
//
// Write published/NAME.json in the format of published/README.md (every figure with the place
// it was read in the level's notes), add its row to that README, run `router sim validate
// published/NAME.json` to see it, then regenerate the table of docs/validation.md (`go test
// ./sim/validate -run TestREADMETable -update`).
package validate
