// Package names is the one home of every name Gantry reads or writes on Kubernetes
// objects: API groups, labels, annotations, the DRA driver, condition types and
// reasons, Event reasons. Its subpackage gvr holds the API resources Gantry watches,
// derived from pkg/apis.
//
// # Import rules
//
//   - pkg/names imports nothing, not even the standard library: its names are plain
//     untyped string constants. So every package may import it, including the
//     Kubernetes-agnostic core (pkg/gang, pkg/scheduler, …) and the API types in
//     pkg/apis (whose group names come from here).
//   - pkg/names/gvr imports API types only (pkg/apis, KubeRay's API types,
//     k8s.io/api). The core must not import it; it is for the code that holds a
//     client (pkg/kube/..., pkg/bootstrap, pkg/webhook, cmd/..., tests).
//
// # The rule
//
// A name is written once, here. Code elsewhere, tests included, uses the constant; a
// name retyped as a literal is a name that can drift. TestNoRetypedNames fails on a
// "gantry.dev/…" string literal anywhere in the module outside this package. Names
// that only tests use (a test's own scheduling gate, say) are not Gantry's and use
// another domain (example.com/…).
//
// Finalizers: Gantry sets none. A scheduler that dies must not leave objects that
// cannot be deleted; what it must remember is on the objects themselves
// (AnnotationGPUs, claim allocations).
package names
