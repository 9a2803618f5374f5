// Package bench measures how fast gantry-scheduler binds a backlog of pending GPU pods
// compared with kube-scheduler v1.37.2, on the same machine, against the same
// kube-apiserver build, with the same workload and the same client QPS, in one run.
//
// A scenario is data (Scenarios): nodes, GPUs per node, pods, gang size, DRA or the
// nvidia.com/gpu extended resource, which schedulers run, and the goals. For each
// scheduler the harness starts a fresh control plane (test/testenv), creates the
// nodes and the whole backlog of pods, then starts the scheduler as a process and
// times, with a watch on pods, every pod's first appearance with spec.nodeName set.
// Throughput is bound pods over the window from the first to the last bind; the wall
// time from the scheduler's start is reported beside it, as is the scheduler's
// resident memory read from /proc. Results are compared as ratios because absolute
// figures vary from run to run.
//
// Entry point: test/bench/cmd/gantry-bench (`make bench`). This package is for
// benchmarks only; nothing in the scheduler imports it. It starts processes from the
// binaries in bin/ and must not depend on pkg/ except pkg/kube for the in-process
// profiling mode.
package bench
