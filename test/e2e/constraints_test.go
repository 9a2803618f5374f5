package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

const zoneKey = "topology.kubernetes.io/zone"

// cpuNodeInZone is a kwok node without GPUs in a zone.
func cpuNodeInZone(name, zone string) *corev1.Node {
	n := gpuNode(name, 0, "", 0)
	n.Labels[zoneKey] = zone
	return n
}

func withAntiAffinity(key, value, topologyKey string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{
				LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{key: value}},
				TopologyKey:   topologyKey,
			}},
		}}
	}
}

func withClaim(claim string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "data", VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim},
		}})
	}
}

// A gang whose members ask for one per node (required anti-affinity on the
// hostname, as a Ray worker group does) gets one per node through the real API
// server; a gang of three on two nodes binds none and says why.
func TestConstraintsGangAntiAffinityOnePerNode(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("aa-1", "a"), cpuNodeInZone("aa-2", "a"))
	spread := withAntiAffinity("app", "worker", "kubernetes.io/hostname")
	two := withAnnotations(names.AnnotationPodGroup, "two", names.AnnotationMinMember, "2")
	createPods(t,
		newPod(ns, "w-0", onTestNodes(t), two, withLabels("app", "worker"), spread),
		newPod(ns, "w-1", onTestNodes(t), two, withLabels("app", "worker"), spread))
	got := waitPods(t, ns, 60*time.Second, "gang of two bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })
	if got[0].Spec.NodeName == got[1].Spec.NodeName {
		t.Fatalf("anti-affine members share node %s:\n%s", got[0].Spec.NodeName, describe(got))
	}

	ns3 := ns + "-3"
	if err := env.CreateNamespace(context.Background(), ns3); err != nil {
		t.Fatal(err)
	}
	three := withAnnotations(names.AnnotationPodGroup, "three", names.AnnotationMinMember, "3")
	for _, name := range []string{"x-0", "x-1", "x-2"} {
		createPods(t, newPod(ns3, name, onTestNodes(t), three, withLabels("app", "x"), withAntiAffinity("app", "x", "kubernetes.io/hostname")))
	}
	got = waitPods(t, ns3, 60*time.Second, "gang of three explained", func(ps []corev1.Pod) bool {
		return len(ps) == 3 && unschedulableMessage(ps, "x-0") != ""
	})
	if n := bound(got); n != 0 {
		t.Fatalf("gang of three one-per-node on two nodes bound %d members:\n%s", n, describe(got))
	}
}

// A pod whose claim is bound to a zonal PersistentVolume lands in that zone.
func TestConstraintsBoundZonalVolumeLandsInItsZone(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("pv-a", "a"), cpuNodeInZone("pv-b", "b"))
	ctx := context.Background()
	empty := ""
	pvName := ns + "-pv"
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: pvName},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
			AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeSource: corev1.PersistentVolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/tmp/" + pvName}},
			ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: "data"},
			StorageClassName:       empty,
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: zoneKey, Operator: corev1.NodeSelectorOpIn, Values: []string{"b"}}},
			}}}},
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: &empty,
			VolumeName:       pvName,
		},
	}
	// The pod first, so that it waits for its claim and is translated again
	// when the claim appears.
	createPods(t, newPod(ns, "head", onTestNodes(t), withClaim("data")))
	waitPods(t, ns, 30*time.Second, "pod told its claim is missing", func(ps []corev1.Pod) bool {
		return strings.Contains(unschedulableMessage(ps, "head"), `persistentvolumeclaim "data" not found`)
	})
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := waitPods(t, ns, 60*time.Second, "pod bound", func(ps []corev1.Pod) bool { return bound(ps) == 1 })
	if got[0].Spec.NodeName != "pv-b" {
		t.Fatalf("pod with a volume in zone b bound to %s", got[0].Spec.NodeName)
	}
}

// A WaitForFirstConsumer claim of a class allowed in zone a only: the pod lands in
// zone a, and the claim is told the node to provision on before the pod is bound.
func TestConstraintsWaitForFirstConsumerClaimSelectsNode(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("wf-a", "a"), cpuNodeInZone("wf-b", "b"))
	ctx := context.Background()
	class := ns + "-wffc"
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{
		ObjectMeta:        metav1.ObjectMeta{Name: class},
		Provisioner:       "csi.example.com",
		VolumeBindingMode: &wffc,
		AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: zoneKey, Values: []string{"a"}}}}},
	}
	if _, err := env.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.StorageV1().StorageClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scratch"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: &class,
		},
	}
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPods(t, newPod(ns, "p", onTestNodes(t), withClaim("scratch")))
	got := waitPods(t, ns, 60*time.Second, "pod bound", func(ps []corev1.Pod) bool { return bound(ps) == 1 })
	if got[0].Spec.NodeName != "wf-a" {
		t.Fatalf("pod whose class allows zone a only bound to %s", got[0].Spec.NodeName)
	}
	// Written before the Binding: it is there once the pod is bound.
	c, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if selected := c.Annotations["volume.kubernetes.io/selected-node"]; selected != "wf-a" {
		t.Fatalf("claim's selected-node = %q, want wf-a", selected)
	}
}
