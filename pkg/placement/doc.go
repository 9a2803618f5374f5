// Package placement decides where one pod or one gang goes: which node, and on it
// which GPUs (whole GPUs, several GPUs, or a share of one GPU's memory); and, when
// nothing fits, why not, in words a user can act on.
//
// It reads and writes only pkg/model values, through a View: a copy-on-write overlay
// of a model.Snapshot, so that a decision can be tried and thrown away (gangs,
// preemption). It must not depend on a Kubernetes client, an informer, I/O or the
// clock: the scheduler, the simulator (pkg/sim) and the benchmarks run this same code,
// so what the simulator measures is what production does. Node selectors, required
// node affinity and taints are evaluated by k8s.io/component-helpers, as
// kube-scheduler evaluates them.
//
// Scoring is chosen by name (see New). The default, "fgd", is fragmentation-aware:
// it places a pod where the expected fragmentation of the cluster, measured against
// the workload's mix of pod shapes, grows least. The mix is learned online from the
// pods that arrive (NewOnline, Arrive, ObserveSnapshot; see learner.go), the same
// way in the scheduler and in the simulator; SetWorkload fixes it, for tests and
// research. See docs/benchmarks.md for how it compares with the published FGD
// policy on the openb trace and the families its authors published.
package placement
