// Package sim replays GPU-cluster traces through the placement core and measures
// how much GPU capacity stays unallocated as the workload arrives.
//
// It drives the same pkg/placement Placer and View the scheduler runs, one pod at a
// time, so a figure measured here is a figure of the production code. The openb
// replay follows the protocol behind the published numbers of Weng et al.
// ("Beware of Fragmentation", USENIX ATC '23); see ../shared/data/openb/README.md
// and docs/benchmarks.md.
//
// It reads trace files and writes reports; it must not depend on a Kubernetes
// client or on the scheduler's wiring (pkg/kube), and the core it calls must not
// depend on it.
package sim
