package gang

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/names"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// buildRay sizes a RayCluster's gang from its spec and picks its minimum members.
func buildRay(g *Gang, members []Member, minimum map[*Member]bool, lookup Lookup) sources {
	cluster := lookup.RayCluster(g.Namespace, g.Name)
	if cluster == nil {
		// Without the spec the size is unknown: hold every pod rather than start part
		// of the cluster.
		present := 0
		for _, m := range members {
			if counts(m) {
				present++
			}
		}
		g.MinMember = max(present, 1)
		g.MissingPods = pick(pointers(members), g.MinMember, minimum)
		g.Missing = fmt.Sprintf("RayCluster %s/%s is not known yet: waiting for it before starting any of its pods", g.Namespace, g.Name)
		return sources{}
	}

	var from sources
	if top, kind := topOwnerOfCluster(cluster, lookup); top != nil {
		g.Owner = kind + "/" + top.GetName()
		from.owners = append(from.owners, top)
		if svc, ok := top.(*rayv1.RayService); ok {
			g.StartFreeFraction = ServeGPUMemoryUtilization(svc.Spec.ServeConfigV2)
		}
	} else {
		g.Owner = "RayCluster/" + cluster.Name
	}
	from.owners = append(from.owners, cluster)

	var heads []*Member
	workers := map[string][]*Member{}
	for i := range members {
		m := &members[i]
		if m.Role == RoleHead {
			heads = append(heads, m)
		} else {
			workers[m.Group] = append(workers[m.Group], m)
		}
	}
	g.MinMember = 1
	g.MissingPods = pick(heads, 1, minimum)
	for _, spec := range cluster.Spec.WorkerGroupSpecs {
		if spec.Suspend != nil && *spec.Suspend {
			continue // its pods, if any remain, are all elastic
		}
		replicas, hosts := minimumReplicas(spec), max(spec.NumOfHosts, 1)
		if replicas < 0 {
			// Counted as 0; a negative count would shrink the gang below its head
			// and let part of it start alone.
			g.Warnings = append(g.Warnings, fmt.Sprintf(
				"RayCluster %s/%s: worker group %s asks for %d replicas: set minReplicas (or replicas) to 0 or more",
				g.Namespace, g.Name, spec.GroupName, replicas))
			replicas = 0
		}
		// In int: int32 replicas × numOfHosts can overflow int32.
		g.MinMember += int(replicas) * int(hosts)
		g.MissingPods += pickWorkers(workers[spec.GroupName], int(replicas), int(hosts), minimum)
	}
	if cluster.Spec.Suspend != nil && *cluster.Spec.Suspend {
		g.Missing = fmt.Sprintf("RayCluster %s/%s is suspended: set spec.suspend to false to start it", g.Namespace, g.Name)
	}
	return from
}

// minimumReplicas is minReplicas, or replicas when minReplicas is unset.
func minimumReplicas(spec rayv1.WorkerGroupSpec) int32 {
	switch {
	case spec.MinReplicas != nil:
		return *spec.MinReplicas
	case spec.Replicas != nil:
		return *spec.Replicas
	}
	return 0
}

// pickWorkers adds a worker group's minimum to minimum: whole multi-host replicas
// (pods sharing ray.io/worker-group-replica-name) when every pod carries that label,
// single pods otherwise. It returns how many pods of the minimum are missing.
func pickWorkers(workers []*Member, replicas, hosts int, minimum map[*Member]bool) (missing int) {
	byReplica := map[string][]*Member{}
	var order []string // replicas in the standing order of their best pod
	for _, m := range workers {
		name := m.Pod.Labels[names.LabelRayReplicaName]
		if name == "" {
			return pick(workers, replicas*hosts, minimum)
		}
		if _, seen := byReplica[name]; !seen {
			order = append(order, name)
		}
		byReplica[name] = append(byReplica[name], m)
	}
	for _, name := range order {
		if replicas == 0 {
			break
		}
		missing += pick(byReplica[name], hosts, minimum)
		replicas--
	}
	return missing + replicas*hosts
}

// topOwnerOfCluster returns the RayJob or RayService that owns the cluster and its kind,
// by owner reference, else by KubeRay's ray.io/originated-from-* labels; nil for a
// standalone RayCluster or an owner not known.
func topOwnerOfCluster(cluster *rayv1.RayCluster, lookup Lookup) (metav1.Object, string) {
	kind, name := "", ""
	if ref := metav1.GetControllerOf(cluster); ref != nil {
		kind, name = ref.Kind, ref.Name
	} else {
		kind, name = cluster.Labels[names.LabelRayOriginatedCRD], cluster.Labels[names.LabelRayOriginatedName]
	}
	switch kind {
	case "RayJob":
		if job := lookup.RayJob(cluster.Namespace, name); job != nil {
			return job, kind
		}
	case "RayService":
		if svc := lookup.RayService(cluster.Namespace, name); svc != nil {
			return svc, kind
		}
	}
	return nil, ""
}
