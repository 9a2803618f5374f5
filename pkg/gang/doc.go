// Package gang decides, from pods and the objects that own them, which pods form a gang
// (a set that starts together or not at all), how many of them must start together,
// which of them are elastic extras, and which queue, priority class and preemptibility
// the gang has. No operator's help is needed: KubeRay need not create PodGroups.
//
// It reads *corev1.Pod and, through the Lookup interface, the typed KubeRay objects
// (RayCluster, RayJob, RayService) and Gantry PodGroups. It must not depend on a client,
// an informer or any I/O (pkg/kube implements Lookup over informer listers; tests and
// the simulator use StaticLookup), nor on the scheduling core beyond pkg/model's names.
//
// # Which gang a pod belongs to (first match wins)
//
//  1. An explicit gang: the pod annotation gantry.dev/pod-group=<name>. With a PodGroup
//     of that name in the namespace, the PodGroup says how many must start together
//     (spec.minMember, and spec.subGroups through the pod label gantry.dev/sub-group);
//     without one, the pods that carry the same annotation form an ad-hoc gang whose
//     size is the largest gantry.dev/min-member among them (all of them when none is
//     set).
//  2. A Ray pod (label ray.io/cluster, head or worker): the gang is the RayCluster.
//     A RayService's pending cluster during an upgrade is a RayCluster of its own, so
//     it is a gang of its own, sized from its own spec.
//  3. A RayJob's submitter pod (K8sJobMode: a pod of the Job that KubeRay names after
//     the RayJob) is a gang of one. KubeRay creates it only once the cluster is ready;
//     counting it in the cluster's gang would deadlock.
//  4. Any other pod is a gang of one, whose GangID is its PodID ("namespace/name").
//
// # How many must start together
//
// A RayCluster's minimum is its head plus, for every worker group that is not
// suspended (workerGroupSpecs[].suspend), minReplicas × numOfHosts (replicas ×
// numOfHosts when minReplicas is unset). Workers above the minimum are elastic: placed
// when capacity allows, given up first. Which pods are the minimum: those already
// bound first, then the oldest; for multi-host groups whole replicas
// (ray.io/worker-group-replica-name) at a time.
//
// Pods that have Succeeded count towards the minimum (a completing gang is not
// stale); Failed and terminating pods do not. When fewer pods exist than the minimum,
// Gang.Missing says "waiting for N of M pods to be created".
//
// # Queue, priority, preemptibility
//
// The queue is the pod's gantry.dev/queue label (kai.scheduler/queue is read as an
// alias); else the PodGroup's spec.queue; else the same labels on the top owner (the
// RayJob or RayService that owns the RayCluster, else the RayCluster, else the
// PodGroup). The priority class is the pod's spec.priorityClassName; else a
// priorityClassName or ray.io/priority-class-name label on the pod; else the PodGroup's
// spec.priorityClassName; else those labels on the top owner. A gantry.dev/preemptible
// label or annotation ("true"/"false") on the pod, else the PodGroup's
// spec.preemptible, else the label or annotation on the top owner, overrides what the
// priority class says. For a gang, members are consulted head first, then by name,
// and the first that says anything decides.
package gang
