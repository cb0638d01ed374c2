# netns-pin - build, demo and test entry points.
#
#   make build   plugin binary: bin/netns-pin and .cache/cni/bin/netns-pin, and
#                the node agent bin/netns-pin-agent (cmd/netns-pin-agent)
#   make tools   pinned cnitool + reference CNI plugins, Multus, crictl, CRI-O,
#                Kubernetes, etcd and the kernel-client guests (Debian's 6.1
#                and 6.12 kernels, hack/vm/) into .cache/ (cached by version;
#                Kubernetes cold ~10 min, CRI-O ~5 min)
#   make demo    walk through a holder ADD / pin / netns survives / DEL (root)
#   make image   the installer image: .cache/image/netns-pin.oci.tar, one OCI
#                image index for linux/amd64 and linux/arm64, the static
#                binaries only, reproducible, stamped from git (hack/image.sh;
#                no container engine)
#   make chart   the Helm chart deploy/chart/netns-pin packaged:
#                .cache/chart/netns-pin-<version>.tgz, the same bytes from the
#                same commit (hack/chart.sh; helm from make tools)
#   make manifests  deploy/'s manifests rendered from the chart (hack/manifests;
#                a test of deploy/ fails while they differ)
#   make test    gofmt, go vet, helm lint --strict, go test -race (all but test/, then with -tags failpoints
#                where tests need it), linux/arm64 (vet, build, unit tests under
#                qemu-user; beside test/kube, after test/kernel), the e2e suites
#                under test/, both demos (root)
#   make e2e     only the e2e suite (E2E_RUN=regexp selects tests)
#   make soak    the randomized model test for SOAK_STEPS steps (SEED=n replays a run)
#   make kube-up / kube-down   a real one-node Kubernetes with netns-pin
#                installed by its DaemonSet (hack/kube/, root); then
#                .cache/kube/bin/kubectl --kubeconfig .cache/kube/admin.kubeconfig
#   make bench   benchmarks (BENCHTIME, BENCHCOUNT, BENCH_SCALE, BENCH_BEFORE=<rev>)
#   make fuzz    every Fuzz target for FUZZTIME each
#   make clean   remove bin/ and .cache/

SHELL       := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
export PATH := /usr/local/go/bin:$(PATH)

GO        ?= go
CACHE     := $(CURDIR)/.cache
CNI_PATH  := $(CACHE)/cni/bin
CNITOOL   := $(CACHE)/bin/cnitool
BENCHTIME ?= 200ms
BENCHCOUNT ?= 10
BENCH_SCALE ?= 1
BENCH_FLAGS ?=
BENCH_BEFORE ?=
FUZZTIME  ?= 20s
SOAK_STEPS ?= 5000
E2E_RUN   ?= .
E2E_FLAGS ?=
# The scenarios of test/kube that run a second time with the kubelet on
# CRI-O (docs/operating.md, "Runtime matrix").
KUBE_CRIO_RUN ?= ^(TestInstalledByDaemonSet|TestHolderDaemonSetRollout|TestRookStyleHolder|TestWhereaboutsControllerAndReconcilerRun)$$
# The scenario of test/kube that runs a third time, with Multus thick
# deployed as upstream ships it (docs/operating.md, "Multus thick mode").
KUBE_THICK_RUN ?= ^TestNodePluginAsItsOwnHolder$$

# What the e2e suite (package test/) reads to find the binaries.
E2E_ENV := NETNS_PIN_CNI_PATH=$(CNI_PATH) NETNS_PIN_CNITOOL=$(CNITOOL) NETNS_PIN_CTL=$(CURDIR)/bin/netns-pinctl

# Go packages with unit/integration tests: everything except the e2e suite.
unit_pkgs = $(shell $(GO) list ./... | grep -v '^github.com/netns-pin/netns-pin/test\(/\|$$\)')

# Unit packages that run on linux/arm64 under qemu-user (Debian's
# qemu-user-static 7.2): the others call openat2 (the store; check, which
# walks the trusted directories with it) or the nsfs ioctls (NS_GET_NSTYPE),
# which its syscall emulation does not implement ("function not
# implemented"); they are vetted and built for arm64.
ARM64_TEST_PKGS ?= ./conf/ ./internal/human/ ./internal/cephfixture/

# Packages whose test files declare a fuzz target (a top-level func Fuzz...):
# only these are listed with go test -list, which links a test binary for
# each package it is given.
fuzz_pkgs = $(shell $(GO) list -f '{{.ImportPath}}{{range .TestGoFiles}} {{$$.Dir}}/{{.}}{{end}}{{range .XTestGoFiles}} {{$$.Dir}}/{{.}}{{end}}' ./... | \
	while read -r pkg files; do [[ -n "$$files" ]] && grep -q '^func Fuzz' $$files && echo "$$pkg"; done)

# Packages with tests that need the failpoints build tag.
failpoint_pkgs = $(shell grep -rl --include='*_test.go' '^//go:build.*failpoints' . 2>/dev/null | grep -v -e '^./.cache/' -e '^./test/' | xargs -r -n1 dirname | sort -u)

comma := ,

# beside NAME CMD OUT FGNAME FGCMD: run CMD (step NAME) in the background,
# its output to OUT, while FGCMD runs as step FGNAME; then print OUT and both
# results (the run fails if either failed). For suites that share nothing on
# the host but the CPU, when one of them mostly waits.
define beside
	@printf '\n=== %s (beside the next step; its output when both ended)\n' "$(1)"
	@bstart=$$(date +%s); \
	{ brc=0; ( $(2) ) >$(3) 2>&1 || brc=$$?; echo "$$brc $$(( $$(date +%s) - bstart ))" >$(3).rc; } & bpid=$$!; \
	printf '\n=== %s\n' "$(4)"; \
	frc=0; start=$$(date +%s); ( $(5) ) || frc=$$?; \
	if ((frc == 0)); then printf '=== %s: ok (%ss)\n' "$(4)" "$$(( $$(date +%s) - start ))"; else printf '=== %s: FAILED (%ss)\n' "$(4)" "$$(( $$(date +%s) - start ))"; fi; \
	wait $$bpid || true; read -r brc bsecs <$(3).rc; \
	printf '\n=== %s (output)\n' "$(1)"; cat $(3); \
	if ((brc == 0)); then printf '=== %s: ok (%ss)\n' "$(1)" "$$bsecs"; else printf '=== %s: FAILED (%ss)\n' "$(1)" "$$bsecs"; fi; \
	((frc == 0 && brc == 0))
endef

# step NAME CMD: run CMD with a header and its wall time.
define step
	@printf '\n=== %s\n' "$(1)"
	@start=$$(date +%s); $(2); printf '=== %s: ok (%ss)\n' "$(1)" "$$(( $$(date +%s) - start ))"
endef

.PHONY: all build image chart manifests chart-lint tools packages demo demos kube-up kube-down test fmt-check vet staticcheck unit failpoints arm64 e2e e2e-run soak bench fuzz clean

all: build

packages:
	@hack/tools.sh packages

# The guest images (unpacking and decompressing Debian's kernel packages)
# and Kubernetes (the longest Go build) build beside the other Go builds:
# they share nothing but the CPU, and fill the time the others spend
# downloading, linking and installing packages.
tools:
	@hack/tools.sh packages
	@hack/vm/build.sh --packages
	$(call step,make tools,mkdir -p $(CACHE); \
		hack/vm/build.sh >$(CACHE)/vm-build.log 2>&1 & vm=$$!; \
		hack/kube/build.sh k8s >$(CACHE)/k8s-build.log 2>&1 & k8s=$$!; \
		rc=0; { hack/tools.sh tools && hack/runtime/setup.sh tools && hack/kube/build.sh; } || rc=$$?; \
		if ! wait $$k8s; then cat $(CACHE)/k8s-build.log; echo "hack/kube/build.sh k8s failed"; rc=1; fi; \
		if ! wait $$vm; then cat $(CACHE)/vm-build.log; echo "hack/vm/build.sh failed"; rc=1; fi; \
		cat $(CACHE)/k8s-build.log >&2; grep -v '^/' $(CACHE)/vm-build.log >&2 || true; (exit $$rc))

build:
	@hack/tools.sh plugin

# The push: README.md, "Install" (skopeo copy --all oci-archive:... docker://...).
image:
	@hack/image.sh

# The push: CHANGELOG.md's release procedure (helm push to an OCI registry).
chart:
	@hack/chart.sh

# deploy/'s manifests from the chart's templates (docs/design.md, "The
# chart and deploy/").
manifests:
	@hack/tools.sh helm
	@$(GO) run ./hack/manifests

# The chart with its default values and with each example of
# deploy/chart/examples/ (helm from make tools).
chart-lint:
	$(call step,helm lint --strict,$(CACHE)/bin/helm lint --strict deploy/chart/netns-pin; \
		for v in deploy/chart/examples/*.yaml; do $(CACHE)/bin/helm lint --strict --quiet deploy/chart/netns-pin --values "$$v"; done)

# make demo: the plugin with cnitool and throwaway netns (seconds).
# make demo DEMO=ceph: the same story on a real one-node Ceph cluster with a
# ceph-fuse client under live I/O, side by side with a Rook-style holder.
# make demo DEMO=kube: a holder DaemonSet rollout on a real one-node
# Kubernetes (hack/kube/up.sh), in kubectl's own output.
# make demo DEMO=nodeplugin: a CSI node plugin as its own holder (links: [],
# deploy/nodeplugin/) rolled while the client it made keeps working.
demo:
ifeq ($(DEMO),ceph)
	@$(MAKE) --no-print-directory tools build
	@$(E2E_ENV) hack/ceph/demo.sh
else ifeq ($(DEMO),kube)
	@hack/kube/demo.sh
else ifeq ($(DEMO),nodeplugin)
	@hack/kube/demo-nodeplugin.sh
else
	@hack/demo.sh
endif

kube-up:
	@hack/kube/up.sh

kube-down:
	@hack/kube/down.sh

fmt-check:
	$(call step,gofmt -l,files=$$(git ls-files -co --exclude-standard -- '*.go' 2>/dev/null || find . -name '*.go' -not -path './.cache/*'); \
		out=; if [[ -n "$$files" ]]; then out=$$(gofmt -l $$files); fi; \
		if [[ -n "$$out" ]]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi)

staticcheck:
	$(call step,staticcheck,$(CACHE)/bin/staticcheck ./...; $(CACHE)/bin/staticcheck -tags failpoints ./...)

vet:
	$(call step,go vet,$(GO) vet ./...; $(GO) vet -tags failpoints ./...)

unit:
	$(call step,go test -race (unit/integration),pkgs="$(unit_pkgs)"; \
		if [[ -z "$$pkgs" ]]; then echo "no packages"; else CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 8m $$pkgs; fi)

# linux/arm64: every package vetted and built (every command among them: the
# plugin and cmd/netns-pin-agent), and the unit tests
# of ARM64_TEST_PKGS run under qemu-user (-exec: no binfmt registration needed).
arm64:
	$(call step,linux/arm64: go vet; go build; go test under qemu-aarch64-static,export GOOS=linux GOARCH=arm64 CGO_ENABLED=0; \
		$(GO) vet ./...; \
		$(GO) build ./...; \
		$(GO) test -count=1 -exec qemu-aarch64-static $(ARM64_TEST_PKGS))

# Crash-recovery tests: only in test builds with the failpoints tag (docs/design.md §11).
failpoints:
	$(call step,go test -race -tags failpoints,pkgs="$(failpoint_pkgs)"; \
		if [[ -z "$$pkgs" ]]; then echo "no failpoint tests"; else CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 8m -tags failpoints $$pkgs; fi)

e2e: tools build e2e-run

# -p 1: the e2e suites share the host (mount table, /var/lib/cni, containerd),
# so they run one package at a time. The one exception: test/kernel runs
# beside test/kube on containerd. Its host side is two Ceph clusters (each in
# its own netns, on its own bridge), taps on their bridges and qemu; netns-pin,
# the clients and their mounts are inside the guests. Nothing of it is in the
# node's mount table, CNI folders or runtime, and the Kubernetes suite mostly
# waits on the kubelet, leaving the CPU to the guests. make test runs its
# make arm64 there too, after the kernel suite (E2E_BESIDE_AFTER): CPU work
# only (cross-compiling, qemu-user), three minutes from an empty Go cache.
E2E_BESIDE_AFTER ?=
e2e-run:
	$(call step,go test ./test/... (e2e),$(E2E_ENV) $(GO) test -p 1 -count=1 -timeout 15m -run '$(E2E_RUN)' $(E2E_FLAGS) $$($(GO) list ./test/... | grep -v -e '/test/ceph$$' -e '/test/kube$$' -e '/test/kernel\(/\|$$\)'))
	$(call beside,go test ./test/kernel (krbd and CephFS kernel clients in qemu guests with Debian's 6.1 and 6.12 kernels$(comma) booted at once; hack/vm/build.sh builds them on first use)$(if $(E2E_BESIDE_AFTER), then make $(E2E_BESIDE_AFTER)),rc=0; $(E2E_ENV) $(GO) test -count=1 -timeout 25m -v -run '$(E2E_RUN)' $(E2E_FLAGS) ./test/kernel/ || rc=$$?; $(if $(E2E_BESIDE_AFTER),$(MAKE) --no-print-directory $(E2E_BESIDE_AFTER) || rc=1;) exit $$rc,$(CACHE)/kernel-suite.out,go test ./test/kube (real one-node Kubernetes; hack/kube/up.sh builds it on first use),$(E2E_ENV) $(GO) test -count=1 -timeout 45m -v -run '$(E2E_RUN)' $(E2E_FLAGS) ./test/kube/)
	$(call step,go test ./test/kube with the kubelet on CRI-O,NETNS_PIN_KUBE_RUNTIME=crio $(E2E_ENV) $(GO) test -count=1 -timeout 20m -v -run '$(KUBE_CRIO_RUN)' $(E2E_FLAGS) ./test/kube/)
	$(call step,go test ./test/kube with Multus thick,NETNS_PIN_KUBE_MULTUS=thick $(E2E_ENV) $(GO) test -count=1 -timeout 20m -v -run '$(KUBE_THICK_RUN)' $(E2E_FLAGS) ./test/kube/)
	$(call step,go test ./test/ceph (real Ceph cluster; prints the side-by-side table),$(E2E_ENV) $(GO) test -count=1 -timeout 10m -v -run '$(E2E_RUN)' $(E2E_FLAGS) ./test/ceph/)

# Both demos run as part of make test: a demo that stops working fails CI.
demos:
	$(call step,make demo,$(E2E_ENV) hack/demo.sh >$(CACHE)/demo.out 2>&1 || { cat $(CACHE)/demo.out; exit 1; }; tail -n 3 $(CACHE)/demo.out)
	$(call step,make demo DEMO=ceph,$(E2E_ENV) hack/ceph/demo.sh >$(CACHE)/demo-ceph.out 2>&1 || { cat $(CACHE)/demo-ceph.out; exit 1; }; tail -n 12 $(CACHE)/demo-ceph.out)

# The randomized model test (test/model, also part of e2e-run with its
# default number of steps) for as many steps as asked; prints the seed,
# steps/s and how many times each invariant was checked. SEED=n replays.
soak:
	$(call step,model soak ($(SOAK_STEPS) steps),MODEL_STEPS=$(SOAK_STEPS) SEED=$(SEED) $(GO) test -count=1 -timeout 0 -v -run '^TestModel$$' ./test/model/)

test: tools build
	@start=$$(date +%s); \
	$(MAKE) --no-print-directory fmt-check vet staticcheck chart-lint unit failpoints e2e-run demos E2E_BESIDE_AFTER=arm64; \
	printf '\n=== make test: all passed (%ss)\n' "$$(( $$(date +%s) - start ))"

# hack/bench.sh (root): builds the do-nothing plugin, inuse's test binary and
# the runner, then measures netns-pin against its baselines, interleaved, and
# prints one markdown table with PASS/over per ceiling (also kept in
# .cache/bench/last.md). BENCH_BEFORE=<git rev> measures that revision's
# plugin in the same rounds; BENCH_SCALE=0.1 BENCHCOUNT=3 is a smoke run.
bench: tools build
	$(call step,bench,BENCHTIME='$(BENCHTIME)' BENCHCOUNT='$(BENCHCOUNT)' BENCH_SCALE='$(BENCH_SCALE)' BENCH_FLAGS='$(BENCH_FLAGS)' BENCH_BEFORE='$(BENCH_BEFORE)' $(E2E_ENV) hack/bench.sh)

# Runs each Fuzz target of each package for FUZZTIME (go test -fuzz takes one target at a time).
# A target that fails without writing a failing input to testdata/fuzz (go's
# fuzz coordinator gives up on a slow worker: "context deadline exceeded")
# runs once more; a real failing input always fails the run.
fuzz:
	@start=$$(date +%s); found=0; for pkg in $(fuzz_pkgs); do \
		for fz in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			found=1; printf '\n=== fuzz %s %s (%s)\n' "$$pkg" "$$fz" "$(FUZZTIME)"; \
			dir=$$($(GO) list -f '{{.Dir}}' $$pkg)/testdata/fuzz/$$fz; \
			before=$$({ ls "$$dir" 2>/dev/null || true; } | wc -l); \
			if ! $(GO) test -run '^$$' -fuzz "^$$fz\$$" -fuzztime $(FUZZTIME) $$pkg; then \
				[[ $$({ ls "$$dir" 2>/dev/null || true; } | wc -l) == "$$before" ]] || exit 1; \
				echo "=== fuzz $$fz stopped without a failing input (the fuzzer's own deadline on a busy machine): once more"; \
				$(GO) test -run '^$$' -fuzz "^$$fz\$$" -fuzztime $(FUZZTIME) $$pkg; \
			fi; \
		done; \
	done; [[ $$found == 1 ]] || echo "no fuzz targets yet"; \
	printf '=== make fuzz: ok (%ss)\n' "$$(( $$(date +%s) - start ))"

clean:
	rm -rf bin .cache
