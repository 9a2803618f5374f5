package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/gantry-dev/gantry/test/testenv"
)

// A pod using a field Gantry does not implement is not placed as if the field were
// not there: it stays pending, and its condition and `gantry explain` name the
// field and say what to change. Here: a request for an extended resource other than
// nvidia.com/gpu (NodeResourcesFit would count it), and an inline in-tree iSCSI
// volume (VolumeRestrictions and NodeVolumeLimits would check it). The node
// advertises the resource, so only the refusal keeps the pod off it.
func TestConstraintsUnsupportedFieldWaitsAndIsExplained(t *testing.T) {
	ns := namespace(t)
	n := cpuNodeInZone("uf-1", "a")
	n.Status.Capacity["example.com/fpga"] = resource.MustParse("4")
	n.Status.Allocatable["example.com/fpga"] = resource.MustParse("4")
	createNodes(t, n)
	fpga := func(p *corev1.Pod) {
		c := &p.Spec.Containers[0]
		c.Resources.Requests["example.com/fpga"] = resource.MustParse("1")
		c.Resources.Limits = corev1.ResourceList{"example.com/fpga": resource.MustParse("1")}
	}
	iscsi := func(p *corev1.Pod) {
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "lun", VolumeSource: corev1.VolumeSource{
			ISCSI: &corev1.ISCSIVolumeSource{TargetPortal: "10.0.0.1:3260", IQN: "iqn.2001-04.com.example:storage", Lun: 0},
		}})
	}
	createPods(t, newPod(ns, "fpga", onTestNodes(t), fpga), newPod(ns, "iscsi", onTestNodes(t), iscsi),
		newPod(ns, "plain", onTestNodes(t)))
	want := map[string][]string{
		"fpga":  {"spec.containers[].resources.requests", "example.com/fpga", "schedulerName"},
		"iscsi": {"spec.volumes[0].iscsi", "PersistentVolumeClaim"},
	}
	got := waitPods(t, ns, 60*time.Second, "plain bound, the others explained", func(ps []corev1.Pod) bool {
		for name, words := range want {
			for _, w := range words {
				if !strings.Contains(unschedulableMessage(ps, name), w) {
					return false
				}
			}
		}
		return nodeOf(ps, "plain") != ""
	})
	if n := bound(got); n != 1 {
		t.Fatalf("%d pods bound, want only plain:\n%s", n, describe(got))
	}

	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for name, words := range want {
		out, err := exec.Command(filepath.Join(bin, "gantry"), "explain", name, "-n", ns, "--kubeconfig", env.Kubeconfig).CombinedOutput()
		if err != nil {
			t.Fatalf("gantry explain %s: %v\n%s", name, err, out)
		}
		for _, w := range words {
			if !strings.Contains(string(out), w) {
				t.Errorf("gantry explain %s does not say %q:\n%s", name, w, out)
			}
		}
	}
	holdPods(t, ns, 2*time.Second, "only plain bound", func(ps []corev1.Pod) bool { return bound(ps) == 1 })
}
