package oracle

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	volumehelpers "k8s.io/component-helpers/storage/volume"
	"sigs.k8s.io/yaml"
)

// TestPlacementsPassKubeSchedulerFilters is the differential test of issue 13: on
// random small clusters, every placement gantry-scheduler makes (through its
// production path, pkg/kube/cache and pkg/podspec into the core) must pass
// kube-scheduler v1.37's own Filter plugins, and a pod Gantry leaves pending must
// find no node that passes them all.
//
// ORACLE_CASES sets how many items (pods or gangs) are judged (default 2000);
// ORACLE_SEED replays one world, logging every item.
func TestPlacementsPassKubeSchedulerFilters(t *testing.T) {
	cases := 2000
	if v := os.Getenv("ORACLE_CASES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			t.Fatalf("ORACLE_CASES=%q: want a number of cases", v)
		}
		cases = n
	}
	seeds := func(yield func(uint64) bool) {
		for s := uint64(1); ; s++ {
			if !yield(s) {
				return
			}
		}
	}
	verbose := false
	if v := os.Getenv("ORACLE_SEED"); v != "" {
		s, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("ORACLE_SEED=%q: want a world's seed", v)
		}
		seeds = func(yield func(uint64) bool) { yield(s) }
		verbose = true
	}
	var st stats
	for seed := range seeds {
		if st.items >= cases && !verbose {
			break
		}
		for _, d := range runWorld(t, seed, &st, verbose) {
			st.disagreements++
			if st.disagreements <= 10 {
				t.Errorf("world %d (replay: ORACLE_SEED=%d): %s", seed, seed, d)
			}
		}
	}
	t.Logf("%d worlds, %d items judged (%d gangs): %d pods placed and checked, %d left pending and checked (%d by a refusal, %d where Gantry is stricter on purpose), %d pending gangs not judged; %d items with a pre-bound volume, %d with a selected-node claim; %d disagreements",
		st.worlds, st.items, st.gangs, st.placed, st.pending, st.refused, st.stricter, st.pendingGangs, st.preBound, st.selected, st.disagreements)
	if st.placed < st.items/3 || st.pending < st.items/10 {
		t.Errorf("the random worlds are lopsided (%d placed, %d pending of %d items): the test no longer exercises both sides", st.placed, st.pending, st.items)
	}
}

type stats struct {
	worlds, items, gangs, placed, pending, refused, pendingGangs, disagreements int
	// stricter counts pending pods for which kube-scheduler passes a node only
	// where Gantry is stricter on purpose (deliberatelyStricter).
	stricter int
	// preBound and selected count the judged items with a claim that has an
	// available volume pre-bound to it, or a selected-node annotation.
	preBound, selected int
}

// countClaims adds the item to st.preBound and st.selected when it uses such claims.
func (w *world) countClaims(item []*corev1.Pod, st *stats) {
	pre, sel := false, false
	for _, p := range item {
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim == nil {
				continue
			}
			for _, c := range w.pvcs {
				if c.Namespace == p.Namespace && c.Name == v.PersistentVolumeClaim.ClaimName {
					pre = pre || w.preBoundTo(c) != nil
					sel = sel || c.Annotations[annSelectedNode] != ""
				}
			}
		}
	}
	if pre {
		st.preBound++
	}
	if sel {
		st.selected++
	}
}

// deliberatelyStricter reports whether Gantry rejects node for pod on purpose
// where kube-scheduler's filters pass it, for one of the pod's unbound "csi-wffc"
// claims (in these worlds the only class provisioned by a driver with topology):
//   - provisioned on a node that lacks one of the driver's topology keys (issue 13
//     asks for the driver's topology to be honoured; kube-scheduler leaves it to the
//     provisioner, which then fails);
//   - provisioned while an available volume pre-bound to the claim does not admit
//     the node: Gantry takes the pre-bound volume as the claim's only choice, where
//     kube-scheduler's binder would provision another (and the volume controller
//     would then bind the claim to the pre-bound one anyway).
func (w *world) deliberatelyStricter(pod *corev1.Pod, node string) bool {
	var keys []string
	for _, c := range w.csiNodes {
		for _, d := range c.Spec.Drivers {
			if d.Name == csiDriver {
				keys = append(keys, d.TopologyKeys...)
			}
		}
	}
	var labels map[string]string
	for _, n := range w.nodes {
		if n.Name == node {
			labels = n.Labels
		}
	}
	lacks := slices.ContainsFunc(keys, func(k string) bool { _, ok := labels[k]; return !ok })
	for _, v := range pod.Spec.Volumes {
		if v.PersistentVolumeClaim == nil {
			continue
		}
		for _, c := range w.pvcs {
			if c.Namespace != pod.Namespace || c.Name != v.PersistentVolumeClaim.ClaimName || c.Spec.VolumeName != "" ||
				c.Spec.StorageClassName == nil || *c.Spec.StorageClassName != "csi-wffc" {
				continue
			}
			if lacks {
				return true
			}
			if pv := w.preBoundTo(c); pv != nil && volumehelpers.CheckNodeAffinity(pv, labels) != nil {
				return true
			}
		}
	}
	return false
}

// preBoundTo returns the available volume whose claimRef names the claim, or nil.
func (w *world) preBoundTo(c *corev1.PersistentVolumeClaim) *corev1.PersistentVolume {
	for _, pv := range w.pvs {
		ref := pv.Spec.ClaimRef
		if pv.Status.Phase == corev1.VolumeAvailable && ref != nil && ref.Namespace == c.Namespace && ref.Name == c.Name &&
			(ref.UID == "" || ref.UID == c.UID) {
			return pv
		}
	}
	return nil
}

// runWorld schedules a world's items one by one and returns the disagreements.
func runWorld(t *testing.T, seed uint64, st *stats, verbose bool) []string {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := newWorld(seed)
	k, err := newKube(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	g, err := newGantry(ctx, w)
	if err != nil {
		t.Fatal(err)
	}
	st.worlds++
	bound := slices.Clone(w.running)
	var out []string
	for _, item := range w.pending {
		st.items++
		w.countClaims(item, st)
		if len(item) > 1 {
			st.gangs++
		}
		res, err := g.schedule(item)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if verbose {
			t.Logf("item %s: gantry placed %v, pending %q", item[0].Name, res.nodes, res.pending)
		}
		if res.nodes != nil {
			st.placed += len(item)
			placed, d := checkPlaced(k, item, res.nodes, bound)
			if d != "" {
				out = append(out, d+"\n"+describe(w, item, bound))
			}
			bound = append(bound, placed...)
			continue
		}
		if len(item) > 1 {
			// kube-scheduler places pods one by one: it has no verdict on a gang.
			st.pendingGangs++
			continue
		}
		st.pending++
		if strings.Contains(res.pending, "spec.") {
			st.refused++
		}
		fit, _ := k.feasible(item[0], bound)
		if kept := slices.DeleteFunc(slices.Clone(fit), func(n string) bool { return w.deliberatelyStricter(item[0], n) }); len(kept) < len(fit) {
			st.stricter++
			fit = kept
		}
		if len(fit) > 0 {
			out = append(out, fmt.Sprintf("gantry left %s pending (%s), but kube-scheduler's filters pass nodes %v\n%s",
				item[0].Name, res.pending, fit, describe(w, item, bound)))
		}
	}
	return out
}

// checkPlaced checks the item's members on their nodes against kube's filters, each
// with the members before it bound, in some order of the members (kube-scheduler
// would place them one at a time). It returns the members as bound pods, and a
// disagreement ("" when none) told for the members' own order.
func checkPlaced(k *kube, item []*corev1.Pod, nodes []string, bound []*corev1.Pod) ([]*corev1.Pod, string) {
	placed := make([]*corev1.Pod, len(item))
	for i, p := range item {
		b := p.DeepCopy()
		b.Spec.NodeName, b.Status.Phase = nodes[i], corev1.PodRunning
		placed[i] = b
	}
	var first string
	for order := range permutations(len(item)) {
		with := slices.Clone(bound)
		failed := ""
		for _, i := range order {
			fit, why := k.feasible(item[i], with)
			if !slices.Contains(fit, nodes[i]) {
				failed = fmt.Sprintf("gantry placed %s on %s, which kube-scheduler's filters reject: %s (nodes that pass: %v)",
					item[i].Name, nodes[i], why[nodes[i]], fit)
				break
			}
			with = append(with, placed[i])
		}
		if failed == "" {
			return placed, ""
		}
		if first == "" {
			first = failed
		}
	}
	return placed, first
}

// permutations yields every order of 0..n-1, the identity first.
func permutations(n int) func(func([]int) bool) {
	return func(yield func([]int) bool) {
		a := make([]int, n)
		for i := range a {
			a[i] = i
		}
		var rec func(k int) bool
		rec = func(k int) bool {
			if k == n {
				return yield(slices.Clone(a))
			}
			for i := k; i < n; i++ {
				a[k], a[i] = a[i], a[k]
				if !rec(k + 1) {
					return false
				}
				a[k], a[i] = a[i], a[k]
			}
			return true
		}
		rec(0)
	}
}

// describe shows what a disagreement needs: the item's pods, the nodes and the
// bound pods.
func describe(w *world, item []*corev1.Pod, bound []*corev1.Pod) string {
	var b strings.Builder
	for _, p := range item {
		y, _ := yaml.Marshal(struct {
			Name   string
			Labels map[string]string
			Spec   corev1.PodSpec
		}{p.Namespace + "/" + p.Name, p.Labels, p.Spec})
		b.WriteString("--- pod\n" + string(y))
	}
	b.WriteString("--- nodes\n")
	for _, n := range w.nodes {
		fmt.Fprintf(&b, "%s labels=%v taints=%v unschedulable=%v alloc=%v\n", n.Name, n.Labels, n.Spec.Taints, n.Spec.Unschedulable, n.Status.Allocatable)
	}
	b.WriteString("--- claims\n")
	for _, c := range w.pvcs {
		class := ""
		if c.Spec.StorageClassName != nil {
			class = *c.Spec.StorageClassName
		}
		fmt.Fprintf(&b, "%s/%s class=%s volume=%s modes=%v selected-node=%q\n", c.Namespace, c.Name, class, c.Spec.VolumeName, c.Spec.AccessModes, c.Annotations[annSelectedNode])
	}
	for _, v := range w.pvs {
		y, _ := json.Marshal(v.Spec.NodeAffinity)
		claim := ""
		if ref := v.Spec.ClaimRef; ref != nil {
			claim = ref.Namespace + "/" + ref.Name
		}
		fmt.Fprintf(&b, "pv %s class=%s phase=%s claim=%s csi=%v labels=%v affinity=%s\n", v.Name, v.Spec.StorageClassName, v.Status.Phase, claim, v.Spec.CSI != nil, v.Labels, y)
	}
	for _, c := range w.csiNodes {
		if a := c.Spec.Drivers[0].Allocatable; a != nil && a.Count != nil {
			fmt.Fprintf(&b, "csinode %s limit=%d keys=%v\n", c.Name, *a.Count, c.Spec.Drivers[0].TopologyKeys)
		}
	}
	b.WriteString("--- bound pods\n")
	for _, p := range bound {
		fmt.Fprintf(&b, "%s/%s on %s labels=%v terminating=%v", p.Namespace, p.Name, p.Spec.NodeName, p.Labels, p.DeletionTimestamp != nil)
		if a := p.Spec.Affinity; a != nil && a.PodAntiAffinity != nil && len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) > 0 {
			y, _ := json.Marshal(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
			fmt.Fprintf(&b, " antiAffinity=%s", y)
		}
		for _, c := range p.Spec.Containers {
			for _, port := range c.Ports {
				fmt.Fprintf(&b, " hostPort=%s/%s:%d", port.Protocol, port.HostIP, port.HostPort)
			}
		}
		for _, v := range p.Spec.Volumes {
			if v.PersistentVolumeClaim != nil {
				fmt.Fprintf(&b, " claim=%s", v.PersistentVolumeClaim.ClaimName)
			}
		}
		b.WriteString("\n")
	}
	return b.String()
}
