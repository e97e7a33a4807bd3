# capn — build, test and run. Every tool is pinned: Go modules in go.mod and
# tools/go.mod (run with `go tool`), Debian packages installed by .ci/run.
SHELL := /bin/bash
GO ?= go
BIN := bin
TOOL := $(GO) tool -modfile=$(CURDIR)/tools/go.mod
DATA_DIR ?= .capn
# Programs: the CLI (with `capn dev`) and one binary per service.
PROGRAMS := $(notdir $(wildcard cmd/*))
export CGO_ENABLED ?= 0

.PHONY: all build run test day2 test-short mod-check proto proto-check lint vet fmt clean bench bench-hosted bench-large npd kube kube-bin autoscaler autoscaler-bin nodestack nodestack-bin nodeimages fuzz images chaos e2e e2e-dir conformance

all: build

build: ## build every program into bin/
	@mkdir -p $(BIN)
	$(GO) build -trimpath -o $(BIN)/ ./cmd/...

images: ## build capn's images locally FROM scratch (hack/images.sh): capn-node:latest, the docker provider's machines, and what docker-compose.yaml runs; `make images IMAGES=capn-node` builds only those
	GO=$(GO) hack/images.sh $(IMAGES)

# capn dev gets no --kube-bin from here: the Kubernetes binaries are never
# guessed (its banner says how to turn them on).
run: build ## run capn dev: embedded JetStream and every service on 127.0.0.1
	$(BIN)/capn dev --data-dir $(DATA_DIR)

# The tests that run NPD or the Kubernetes binaries get where they are (or
# will be), and skip without them; nothing else does.
TEST_ENV = CAPN_NPD_BIN="$(NPD_BIN)" CAPN_KUBE_BIN="$(KUBE_BIN)" CAPN_AUTOSCALER_BIN="$(AUTOSCALER_BIN)" CAPN_NODESTACK_BIN="$(NODESTACK_BIN)" CAPN_NODEIMAGES="$(NODEIMAGES)"

test: mod-check proto-check lint ## everything CI runs
	$(TEST_ENV) $(GO) test -count=1 -timeout 30m ./...

test-short:
	$(TEST_ENV) $(GO) test -short -count=1 ./...

mod-check: ## fail if go.mod or go.sum (or tools/go.mod, tools/go.sum) is not what go mod tidy makes
	@$(GO) mod tidy -diff || { echo "go.mod/go.sum are not tidy: run go mod tidy and commit the result"; exit 1; }
	@cd tools && $(GO) mod tidy -diff || { echo "tools/go.mod/go.sum are not tidy: run go mod tidy in tools/ and commit the result"; exit 1; }

proto: ## regenerate Go from schemas/ with the pinned buf, protoc-gen-go and protoc-gen-go-grpc
	cd schemas && $(TOOL) buf lint && $(TOOL) buf generate

GENERATED := schemas/capn schemas/externalgrpc
proto-check: proto ## fail if generated code is not what the schemas give
	@git diff --exit-code --stat -- $(GENERATED) || { echo "make proto changed generated code: commit the result"; exit 1; }
	@test -z "$$(git status --porcelain --untracked-files=all -- $(GENERATED))" || { git status --short -- $(GENERATED); echo "make proto left untracked files"; exit 1; }

vet:
	$(GO) vet ./...

# A test waits on a condition (testkit.WaitFor, natstest.WaitFor), never on
# time: lint fails on a time.Sleep in a _test.go file unless its line says
# why it is not a wait (//sleep-ok: <reason>).
lint: vet ## gofmt, go vet, staticcheck, no sleeping tests and the import rules
	@out=$$(gofmt -l $$(git ls-files '*.go' | grep -v '\.pb\.go$$')); test -z "$$out" || { echo "gofmt needed:"; echo "$$out"; exit 1; }
	@out=$$(git grep -n 'time\.Sleep(' -- '*_test.go' | grep -vE '//sleep-ok: *[^ ]'); test -z "$$out" || { echo "time.Sleep in a test: wait on a condition (testkit.WaitFor), or say why with //sleep-ok: <reason> on the line:"; echo "$$out"; exit 1; }
	$(TOOL) staticcheck ./...

fmt:
	gofmt -w $$(git ls-files '*.go' | grep -v '\.pb\.go$$')

# FUZZTIME is a count of executions per target, not a duration: with a
# duration, Go 1.26's fuzz coordinator can fail a run with "context deadline
# exceeded" and no failing input when the time ends while a worker is busy
# (go.dev/issue/75804, fixed in Go 1.27); minimizing a new input is bounded
# by count for the same reason.
FUZZTIME ?= 20000x
FUZZ = $(GO) test -run '^$$' -fuzztime $(FUZZTIME) -fuzzminimizetime 1000x
fuzz: ## run every fuzz test for FUZZTIME executions (CI: a short run; the corpora live in testdata/fuzz)
	$(FUZZ) -fuzz '^FuzzApply$$' ./gateway
	$(FUZZ) -fuzz '^FuzzIngest$$' ./gateway
	$(FUZZ) -fuzz '^FuzzImport$$' ./schemas/capi
	$(FUZZ) -fuzz '^FuzzParse$$' ./schemas/keys
	$(FUZZ) -fuzz '^FuzzDecodeMatchesReference$$' ./schemas/manifest
	$(FUZZ) -fuzz '^FuzzDecodeAddonSet$$' ./schemas/manifest
	$(FUZZ) -fuzz '^FuzzDecode$$' ./schemas/backupfile

NPD_VERSION ?= v1.36.0
npd: ## build node-problem-detector for tests/health and tests/kube (cached outside the repo by version)
	NPD_VERSION=$(NPD_VERSION) GO=$(GO) hack/npd.sh
# Where it is (or will be): `make test` hands it to tests/health and tests/kube,
# which skip without it (fail under CI=true). --print-path builds nothing; it
# runs only when a test target needs the path. CAPN_NPD_BIN overrides it.
NPD_BIN = $(or $(CAPN_NPD_BIN),$(shell NPD_VERSION=$(NPD_VERSION) hack/npd.sh --print-path))

# The Kubernetes binaries workload clusters run, and tests/kube's smoke test
# of them: etcd, etcdctl, kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl, and kwok for fake nodes. KUBE_VERSIONS are every
# Kubernetes version built, oldest first (each cached in its own directory;
# etcd and kwok are built once and shared); KUBE_VERSION, the newest, is the
# default one (hack/kube.sh --print-path, the quickstart). To add a version:
# make kube KUBE_VERSIONS="v1.35.x v1.36.5 v1.37.2" (k8s.io/kubernetes and
# its staging modules at v0.<minor>.<patch> must be on the module proxy).
KUBE_VERSIONS ?= v1.36.5 v1.37.2
KUBE_VERSION ?= $(lastword $(KUBE_VERSIONS))
ETCD_VERSION ?= v3.7.0
KWOK_VERSION ?= v0.8.0
KUBE_ENV := ETCD_VERSION=$(ETCD_VERSION) KWOK_VERSION=$(KWOK_VERSION)
# Where they are (or will be): a colon-separated list of bin directories, one
# per version in KUBE_VERSIONS' order (a single directory is a list of one).
# `make test` hands it to the tests that run Kubernetes as CAPN_KUBE_BIN; they
# skip without the binaries (fail under CAPN_REQUIRE_KUBE=1) and use the
# newest version unless they need several. --print-path builds nothing; it
# runs only when a test target needs the path, and `make run` never gets it.
# CAPN_KUBE_BIN overrides it.
empty :=
space := $(empty) $(empty)
KUBE_BIN = $(or $(CAPN_KUBE_BIN),$(subst $(space),:,$(strip $(foreach v,$(KUBE_VERSIONS),$(shell KUBE_VERSION=$(v) $(KUBE_ENV) hack/kube.sh --print-path)))))
kube-bin: ## print KUBE_BIN, the bin directories of every KUBE_VERSIONS (CAPN_KUBE_BIN=$$(make -s kube-bin))
	@echo "$(KUBE_BIN)"
kube: ## build the Kubernetes binaries of every KUBE_VERSIONS (cached outside the repo by version; ~25 min cold per version on 2 cores, under a minute warm)
	@set -e; for v in $(KUBE_VERSIONS); do KUBE_VERSION=$$v $(KUBE_ENV) GO=$(GO) hack/kube.sh; done

# The upstream cluster-autoscaler, externalgrpc cloud provider only, that
# tests/autoscaler runs against capn's autoscaler-provider: release
# cluster-autoscaler-1.36.1 of github.com/kubernetes/autoscaler (its
# Kubernetes libraries are v0.36.2; it runs against the v1.36 and v1.37 API
# servers of KUBE_VERSIONS). hack/autoscaler.sh takes the commit's source
# from the module proxy, or where the proxy does not serve it (403, here and
# in CI) from the repository's snapshot (below), or else from git
# (CAPN_AUTOSCALER_GIT); its dependencies come from the module proxy.
AUTOSCALER_COMMIT ?= 35e8a280425c76a4040f57ae0fa232a952c02024
# The sha256 of third_party/cluster-autoscaler/cluster-autoscaler-<commit>.tar.gz,
# the pruned snapshot of the commit hack/autoscaler.sh builds from when the
# module proxy refuses it (regenerate both: hack/autoscaler-snapshot.sh <mirror>).
AUTOSCALER_SNAPSHOT_SHA256 ?= 659262a6ed99241fb9f9ce74b542e7173c0f5c7381fecb12addd3956ff7cbb2d
# Where it is (or will be): `make test` hands it to tests/autoscaler as
# CAPN_AUTOSCALER_BIN; the test skips without it (fails under
# CAPN_REQUIRE_AUTOSCALER=1). CAPN_AUTOSCALER_BIN overrides it.
AUTOSCALER_BIN = $(or $(CAPN_AUTOSCALER_BIN),$(shell AUTOSCALER_COMMIT=$(AUTOSCALER_COMMIT) hack/autoscaler.sh --print-path))
autoscaler: ## build the cluster-autoscaler with -tags externalgrpc (cached outside the repo by commit; ~8 min of CPU cold, under a minute warm)
	AUTOSCALER_COMMIT=$(AUTOSCALER_COMMIT) AUTOSCALER_SNAPSHOT_SHA256=$(AUTOSCALER_SNAPSHOT_SHA256) GO=$(GO) hack/autoscaler.sh
autoscaler-bin: ## print AUTOSCALER_BIN, the cluster-autoscaler binary (CAPN_AUTOSCALER_BIN=$$(make -s autoscaler-bin))
	@echo "$(AUTOSCALER_BIN)"

# A real node's stack (issue 26): containerd v2, runc (seccomp), the CNI
# plugins bridge/host-local/loopback/portmap (hack/nodestack.sh), and
# kubelet, kubeadm, kube-proxy of KUBE_VERSION (hack/kube.sh's node
# flavour), and CoreDNS (hack/coredns.sh, the version kubeadm's image tag
# names), cached outside the repo by version. NODESTACK_BIN is
# "<stack bin>:<kube node bin>"; tests/node gets it as CAPN_NODESTACK_BIN and
# skips without it (fails under CAPN_REQUIRE_NODESTACK=1).
NODESTACK_BIN = $(or $(CAPN_NODESTACK_BIN),$(shell KUBE_VERSION=$(KUBE_VERSION) hack/nodestack.sh --print-path))
nodestack: ## build a real node's stack: containerd, runc, CNI plugins, kubelet/kubeadm/kube-proxy, CoreDNS (cached outside the repo by version)
	KUBE_VERSION=$(KUBE_VERSION) GO=$(GO) hack/nodestack.sh --kube
	GO=$(GO) hack/coredns.sh
nodestack-bin: ## print NODESTACK_BIN, "<containerd/runc/CNI bin>:<kubelet/kubeadm/kube-proxy bin>" (CAPN_NODESTACK_BIN=$$(make -s nodestack-bin))
	@echo "$(NODESTACK_BIN)"
# The images kubeadm runs: its static pods' (pause, etcd, kube-apiserver,
# kube-controller-manager, kube-scheduler of KUBE_VERSION) and its add-ons'
# (kube-proxy with Debian's iptables, CoreDNS), FROM scratch as OCI archives
# for `ctr images import` (hack/nodeimages.sh, after make kube nodestack),
# cached outside the repo by version.
# tests/node gets the directory as CAPN_NODEIMAGES.
NODEIMAGES = $(or $(CAPN_NODEIMAGES),$(shell KUBE_VERSION=$(KUBE_VERSION) $(KUBE_ENV) hack/nodeimages.sh --print-path))
nodeimages: ## build kubeadm's images (control plane, kube-proxy, CoreDNS) FROM scratch as OCI archives from the cached binaries (after make kube nodestack)
	KUBE_VERSION=$(KUBE_VERSION) $(KUBE_ENV) GO=$(GO) hack/nodeimages.sh

# The upstream Kubernetes conformance tests on real nodes (issue 26):
# e2e.test (`go test -c` of k8s.io/kubernetes/test/e2e at KUBE_VERSION),
# ginkgo (the version k8s.io/kubernetes requires), agnhost, and the images
# the chosen specs run (agnhost, busybox) FROM scratch, built by
# hack/e2e.sh from the Go module proxy and Debian's packages, cached
# outside the repo by version. providers/process's TestRealNodesConformance
# gets the directory as CAPN_E2E_DIR.
E2E_DIR = $(or $(CAPN_E2E_DIR),$(shell KUBE_VERSION=$(KUBE_VERSION) GO=$(GO) hack/e2e.sh --print-path))
e2e: ## build e2e.test, ginkgo, agnhost and the e2e images FROM scratch (cached outside the repo by version; 254 s after make kube, whose Go build cache it reuses)
	KUBE_VERSION=$(KUBE_VERSION) GO=$(GO) hack/e2e.sh
e2e-dir: ## print E2E_DIR (CAPN_E2E_DIR=$$(make -s e2e-dir))
	@echo "$(E2E_DIR)"
# The subset: TestRealNodesConformance's conformanceFocus but its
# conformanceSkips, E2E_PROCS specs at a time, on a cluster capn made:
# `capn apply` of a kubeadm control plane and 2 workers on the process
# provider's real nodes, its kubeconfig from `capn kubeconfig` (needs
# root, make kube nodestack nodeimages e2e).
# The JUnit report and ginkgo's log go to E2E_REPORT_DIR.
E2E_PROCS ?= 4
E2E_REPORT_DIR ?= $(CURDIR)/bin/conformance
conformance: e2e ## run the upstream conformance subset (pods, Services, DNS, ConfigMaps, Secrets, Deployments) on a cluster `capn apply` made on real nodes (1 control plane, 2 workers); ~10 min, not in make test
	CAPN_E2E=1 CAPN_REQUIRE_NODESTACK=1 CAPN_REQUIRE_KUBE=1 CAPN_E2E_DIR="$(E2E_DIR)" CAPN_E2E_PROCS=$(E2E_PROCS) CAPN_E2E_REPORT_DIR="$(E2E_REPORT_DIR)" $(TEST_ENV) \
		$(GO) test -count=1 -timeout 120m -v -run '^TestRealNodesConformance$$' ./providers/process

BENCH_CLUSTERS ?= 100,300,1000
BENCH_RUNS ?= 3
bench: ## fleet-scale benchmarks (fleet create, repair, upgrade, ingest, a class rollout in waves to 1,000 clusters, idle) against the same-run NATS baseline → docs/benchmarks.md
	$(GO) run ./cmd/capn-bench --clusters $(BENCH_CLUSTERS) --runs $(BENCH_RUNS) --out docs/benchmarks.md

bench-large: ## beyond make bench's time (issue 24): fleet create on the rendered 3-node JetStream cluster (R3, TLS, a user per service) beside 1 node at 100 and 1,000 clusters, and 100,000 sim machines (time, peak RSS, CPU per machine vs 10,000) → docs/benchmarks.md (~10 min)
	$(GO) run ./cmd/capn-bench --bench replicated,large --runs 1 --out docs/benchmarks.md

BENCH_HOSTED ?= auto
bench-hosted: ## hosted control planes' density (issue 21; not in bench): BENCH_HOSTED at once (auto: half the free memory at 500 MiB each, at most 20), one with a worker, the machine-based figure → docs/benchmarks.md (needs make kube; minutes)
	$(GO) run ./cmd/capn-bench --bench hosted --hosted $(BENCH_HOSTED) --kube-bin "$(KUBE_BIN)" --out docs/benchmarks.md

day2: ## the day-2 check alone on a real cluster (process provider, two Kubernetes versions; ~4 min): upgrade with a PDB, drain, hooks, hibernate
	CAPN_REQUIRE_KUBE=1 CAPN_KUBE_BIN="$(KUBE_BIN)" $(GO) test -count=1 -timeout 20m -v -run '^TestConformance/KubernetesDay2$$' ./providers/process

chaos: ## chaos tests at fleet scale: 1,000 sim machines, services killed, messages duplicated and replayed, a whole-system restart (the short version runs in make test)
	CAPN_CHAOS=full $(GO) test -count=1 -timeout 30m -v -run '^TestChaos$$' ./tests/chaos

# Running on a 3-node JetStream cluster with docker-compose (README.md):
# make images nats-config; docker-compose --env-file deploy/local/compose.env up -d
.PHONY: nats-config certs e2e-compose
DEPLOY_DIR ?= deploy/local
nats-config: ## render the NATS nodes' config, one nkey user per component, TLS certificates, env files, secrets key and admin token into DEPLOY_DIR
	$(GO) run ./cmd/capn-nats-config render --out $(DEPLOY_DIR)

certs: nats-config ## local TLS certificates (CAs, nodes, routes, users) in DEPLOY_DIR: made by the render, which keeps existing ones

e2e-compose: ## docker-compose end to end: build images, bring it up, lose a NATS node and a replica of each service mid-rollout (needs Docker)
	CAPN_E2E_COMPOSE=1 CAPN_REQUIRE_DOCKER=1 $(GO) test -count=1 -timeout 30m -run TestCompose -v ./tests/compose

clean:
	rm -rf $(BIN)
