# Gantry. `make test` is what CI runs; `make run` starts the sandbox.
SHELL := /bin/bash
BIN := $(CURDIR)/bin
GO ?= go
export PATH := $(BIN):$(PATH)
# Tests find the control-plane binaries here (test/testenv).
export GANTRY_BIN_DIR := $(BIN)
# go-nvml's header marks old NVML calls deprecated; the warnings would bury real output.
export CGO_CFLAGS ?= -O2 -Wno-deprecated-declarations

K8S_VERSION := v1.37.2
K8S_LDFLAGS := -s -w \
	-X k8s.io/component-base/version.gitVersion=$(K8S_VERSION) \
	-X k8s.io/component-base/version.gitMajor=1 \
	-X k8s.io/component-base/version.gitMinor=37 \
	-X k8s.io/component-base/version.gitTreeState=clean

TOOLS := $(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl \
	$(BIN)/etcd $(BIN)/kwok $(BIN)/kwok-stages.yaml $(BIN)/kuberay-operator $(BIN)/kuberay-crds/.stamp \
	$(BIN)/controller-gen $(BIN)/helm

.PHONY: all build test test-deps unit integration tools generate lint bench bench-quick bench-scale bench-burst run clean-tools gpu-smoke chaos oracle soak fuzz images images-smoke chart-package gpu-smoke-binary

# The release version: the chart's appVersion, which is also the images' default tag.
VERSION ?= $(shell sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$$/\1/p' deploy/helm/gantry/Chart.yaml)
REGISTRY ?= ghcr.io/gantry-dev

# progress NAME: says which tool a cold build is on and how many are still missing, so
# that twenty minutes of compiling does not look like a hang.
progress = @n=0; for f in $(TOOLS); do [ -e "$$f" ] || n=$$((n+1)); done; \
	echo ">> building $(1) ($$n of $(words $(TOOLS)) tools still to build; a cold first build takes about 20 minutes on 2 cores)"

all: build

## tools: build the pinned Kubernetes, etcd, kwok, KubeRay and controller-gen binaries into bin/.
## Each binary is rebuilt only when its module's go.mod or go.sum changes.
tools: $(TOOLS)

$(BIN)/kube-apiserver $(BIN)/kube-controller-manager $(BIN)/kube-scheduler $(BIN)/kubectl: $(BIN)/%: hack/tools/kubernetes/go.mod hack/tools/kubernetes/go.sum
	$(call progress,$* $(K8S_VERSION))
	cd hack/tools/kubernetes && $(GO) build -trimpath -ldflags '$(K8S_LDFLAGS)' -o $@ k8s.io/kubernetes/cmd/$*

$(BIN)/etcd: hack/tools/etcd/go.mod hack/tools/etcd/go.sum hack/tools/etcd/main.go
	$(call progress,etcd)
	cd hack/tools/etcd && $(GO) build -trimpath -ldflags '-s -w' -o $@ .

$(BIN)/kwok: hack/tools/kwok/go.mod hack/tools/kwok/go.sum
	$(call progress,kwok)
	cd hack/tools/kwok && $(GO) build -trimpath -ldflags '-s -w' -o $@ sigs.k8s.io/kwok/cmd/kwok

# kwok ships its stock node and pod lifecycles as YAML in its module; a standalone kwok
# needs them passed as --config.
$(BIN)/kwok-stages.yaml: hack/tools/kwok/go.mod hack/tools/kwok/go.sum
	@mkdir -p $(BIN)
	cd hack/tools/kwok && d=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/kwok) && \
	for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
	         pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do \
	  echo '---'; cat $$d/kustomize/stage/$$f; done > $@.tmp && mv $@.tmp $@

# The RayCluster/RayJob/RayService CRDs of the pinned KubeRay release.
$(BIN)/kuberay-crds/.stamp: hack/tools/kuberay/go.mod hack/tools/kuberay/go.sum
	@mkdir -p $(BIN)/kuberay-crds
	cd hack/tools/kuberay && d=$$($(GO) list -m -f '{{.Dir}}' github.com/ray-project/kuberay/ray-operator) && \
	cp $$d/config/crd/bases/*.yaml $(BIN)/kuberay-crds/ && chmod u+w $(BIN)/kuberay-crds/*.yaml
	touch $@

$(BIN)/kuberay-operator: hack/tools/kuberay/go.mod hack/tools/kuberay/go.sum
	$(call progress,the KubeRay operator)
	cd hack/tools/kuberay && $(GO) build -trimpath -ldflags '-s -w' -o $@ github.com/ray-project/kuberay/ray-operator

$(BIN)/controller-gen: hack/tools/controller-gen/go.mod hack/tools/controller-gen/go.sum
	$(call progress,controller-gen)
	cd hack/tools/controller-gen && $(GO) build -trimpath -ldflags '-s -w' -o $@ sigs.k8s.io/controller-tools/cmd/controller-gen

$(BIN)/helm: hack/tools/helm/go.mod hack/tools/helm/go.sum
	$(call progress,helm)
	cd hack/tools/helm && v=$$($(GO) list -m -f '{{.Version}}' helm.sh/helm/v3) && \
	$(GO) build -trimpath -o $@ -ldflags "-s -w -X helm.sh/helm/v3/internal/version.version=$$v \
	  -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/chartutil.k8sVersionMinor=37 \
	  -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMajor=1 -X helm.sh/helm/v3/pkg/lint/rules.k8sVersionMinor=37" \
	  helm.sh/helm/v3/cmd/helm

clean-tools:
	rm -f $(TOOLS)

## build: the three Gantry binaries into bin/, and bin/kubectl-gantry (the CLI as a
## kubectl plugin: `kubectl gantry explain POD`). The scheduler and the node agent are
## built as their images ship them (hack/images/gobuild.sh: a static scheduler), so
## `make images` afterwards only links them.
build:
	GO=$(GO) hack/images/gobuild.sh gantry-scheduler $(BIN)
	GO=$(GO) hack/images/gobuild.sh gantry-node-agent $(BIN)
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN)/gantry ./cmd/gantry
	ln -sf gantry $(BIN)/kubectl-gantry

## images: the gantry-scheduler and gantry-node-agent images, tagged
## $(REGISTRY)/NAME:$(VERSION) as the chart expects, with podman, buildah or docker.
## Offline: binaries built here, the agent's base unpacked from Debian's packages
## (hack/images). ARCHS="amd64 arm64" builds both.
images:
	VERSION=$(VERSION) REGISTRY=$(REGISTRY) hack/images/build.sh

## images-smoke: start each binary from its image (after `make images`).
images-smoke:
	VERSION=$(VERSION) REGISTRY=$(REGISTRY) hack/images/smoke.sh

## chart-package: the Helm chart as _output/gantry-$(VERSION).tgz (the release pushes
## it to oci://$(REGISTRY)/charts).
chart-package: $(BIN)/helm
	@mkdir -p _output
	$(BIN)/helm package deploy/helm/gantry --version $(VERSION) --app-version $(VERSION) -d _output

## test: unit and integration tests (integration tests start a real kube-apiserver,
## etcd, kube-controller-manager, kwok and KubeRay from bin/, built first if needed).
test: tools build test-deps oracle
	$(GO) test -count=1 -timeout 45m ./...

## oracle: the differential test of Gantry's placements against kube-scheduler v1.37's
## own Filter plugins (test/oracle, a module of its own so that the main go.mod stays
## free of k8s.io/kubernetes). ORACLE_CASES=n judges n random pods and gangs (default
## 2000); ORACLE_SEED=s replays one world. A cold build compiles the scheduler's
## plugins from k8s.io/kubernetes (minutes on 2 cores); later runs use the build cache.
oracle:
	cd test/oracle && $(GO) test -count=1 -timeout 20m ./...

## test-deps: Debian packages the tests use: prometheus (the dashboards are checked
## against a real one scraping the sandbox). Installed when missing, as root.
test-deps:
	@command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo ">> installing Debian's prometheus package"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends prometheus >/dev/null; \
	  else echo "make test needs Debian's prometheus package: sudo apt-get install prometheus" >&2; exit 1; fi; }

## unit: only the tests that need no control plane (the chart tests need bin/helm).
unit: $(BIN)/helm
	$(GO) test -short -count=1 ./...

## generate: deepcopy code and CRD manifests from pkg/apis.
generate: $(BIN)/controller-gen
	$(BIN)/controller-gen object paths=./pkg/apis/...
	# Queue quotas are float64 as in KAI Scheduler, which controller-gen calls dangerous.
	$(BIN)/controller-gen crd:allowDangerousTypes=true paths=./pkg/apis/... output:crd:artifacts:config=deploy/crds
	cp deploy/crds/*.yaml deploy/helm/gantry/files/crds/

## lint: gofmt, go vet, and actionlint on the GitHub workflows (built from its Go
## module, pinned in hack/tools/actionlint).
lint: $(BIN)/actionlint
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(BIN)/actionlint -shellcheck= -pyflakes= .github/workflows/*.yaml

$(BIN)/actionlint: hack/tools/actionlint/go.mod hack/tools/actionlint/go.sum
	@echo ">> building actionlint"
	cd hack/tools/actionlint && $(GO) build -trimpath -ldflags '-s -w' -o $@ github.com/rhysd/actionlint/cmd/actionlint

## bench: the core's benchmarks (placement, victim search), the seed's preemption
## latency, the DRA allocator per cycle, then scheduler throughput against kube-scheduler
## (test/bench, scenarios a–e, three runs each, ~20 min).
bench: tools build
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/...
	$(GO) test -run '^$$' -bench SeedPreemption -benchtime 20x ./test/e2e
	$(GO) run ./test/bench/cmd/gantry-bench -repeat 3 -json $(BIN)/bench-throughput.json

## bench-quick: throughput scenarios a and c at a tenth of their size (~2 min).
bench-quick: tools build
	$(GO) run ./test/bench/cmd/gantry-bench -scenarios a,c -scale 0.1

## bench-scale: issue 21's drains (5,000, 20,000 and 100,000 pods), gangs and steady
## arrivals (100, 400, 800 pods/s on 2,000 and 5,000 nodes), each beside the API
## server's floor (a bare binder) and kube-scheduler where it applies, three runs each
## (hours on 2 cores). SCALE_ARGS adds gantry-bench flags, e.g.
## SCALE_ARGS="-scenarios drain-5k,gang-1k -repeat 1 -profile-dir /tmp/prof".
## kube-scheduler's 100,000-pod drain (20 minutes here, with its setup) runs only when asked:
## SCALE_ARGS="-scenarios drain-100k -schedulers kube -repeat 1 -run-timeout 45m".
SCALE_ARGS ?=
bench-scale: tools build
	$(GO) run ./test/bench/cmd/gantry-bench -scenarios scale -repeat 3 -run-timeout 30m -timeout 6h \
	  -json $(BIN)/bench-scale.json $(SCALE_ARGS)

## bench-burst: issue 19's live preemption burst: 8 kwok nodes × 8 H100 full of 16
## training RayClusters, then 1, 8 and 32 vLLM RayServices at once, whole GPUs and
## 20Gi shares, kwok with a 5 s grace period, three runs each (~30 min on 2 cores).
## BURST_ARGS adds flags of test/bench/cmd/gantry-burst, e.g. BURST_ARGS="-bursts 8 -repeat 1".
BURST_ARGS ?=
bench-burst: tools build
	$(GO) run ./test/bench/cmd/gantry-burst -json $(BIN)/bench-burst.json $(BURST_ARGS)

## run: the sandbox cluster playing the seed scenario, then staying up until Ctrl-C.
## RUN_ARGS adds flags of `gantry sandbox up`, e.g. RUN_ARGS="--nodes 4 --gpus dgxh100";
## CI runs RUN_ARGS=--exit-after-demo, which fails unless the demo ends with the seed's picture.
RUN_ARGS ?=
run: tools build
	$(BIN)/gantry sandbox up --demo $(RUN_ARGS)

## gpu-smoke: the node agent's discovery and metrics against the real NVIDIA driver
## (run it on a GPU machine; it says so and fails elsewhere).
gpu-smoke:
	hack/gpu-smoke.sh

## chaos: ROUNDS randomized rounds (default 100), each injecting one fault (scheduler
## SIGKILLed between binds, during evictions or in a leader handover; kube-apiserver or
## etcd restarted; a node deleted under a gang; KubeRay restarted; the webhook down;
## KubeRay's CRDs installed late) with the invariants checked throughout (test/chaos).
## CHAOS_SEED replays a run; CHAOS_FAULTS=a,b picks faults. `make test` runs 3 rounds.
ROUNDS ?= 100
chaos: tools
	ROUNDS=$(ROUNDS) $(GO) test -count=1 -timeout 0 -v -run TestChaos ./test/chaos

## soak: SOAK_DURATION (default 30m) of churn on 1,000 kwok nodes, reporting the
## scheduler's RSS and goroutine slopes and cycle p99 (test/soak); SOAK_OUT=file.json
## keeps the samples.
SOAK_DURATION ?= 30m
soak: tools
	SOAK_DURATION=$(SOAK_DURATION) $(GO) test -count=1 -timeout 0 -v -run TestSoak ./test/soak

## fuzz: every native Go fuzz target (func FuzzX in *_fuzz_test.go) for FUZZTIME each
## (default 5m). A crash is written under the package's testdata/fuzz and then replays
## as a regression test in every `go test`.
FUZZTIME ?= 5m
fuzz:
	@set -e; for f in $$(find pkg cmd test -name '*_fuzz_test.go' | sort); do \
	  d=$$(dirname $$f); \
	  for n in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
	    echo ">> ./$$d $$n for $(FUZZTIME)"; \
	    $(GO) test ./$$d -run '^$$' -fuzz "^$$n\$$" -fuzztime $(FUZZTIME); \
	  done; \
	done

## gpu-smoke-binary: build bin/gpu-smoke to carry to a GPU machine without Go
gpu-smoke-binary:
	CGO_ENABLED=1 CGO_CFLAGS="-O2 -Wno-deprecated-declarations" $(GO) build -o $(BIN)/gpu-smoke ./hack/gpu-smoke
