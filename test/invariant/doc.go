// Package invariant watches a cluster and reports the first time Gantry breaks one of
// its promises: no partial gang, no GPU given twice, nothing lost.
//
// The checks are pure functions of API objects (checks.go, gpus.go) so that they can be
// unit-tested on hand-made violating objects; Checker (watch.go) feeds them from
// informers and remembers what needs a history (how long a gang has been partly bound,
// which pods were just bound, how often a pod was preempted).
//
// The checker deliberately reads the cluster the way a user would, from the API
// objects and the documented annotations (DESIGN.md, "Names"), and does not import the
// scheduler (pkg/kube, pkg/scheduler): a checker that shared the scheduler's parsers
// would share its bugs.
//
// Attach it to a test with
//
//	invariant.Watch(t, invariant.Config{RestConfig: env.Config})
//
// which fails t at cleanup with every violation seen. This package is for tests only.
package invariant
