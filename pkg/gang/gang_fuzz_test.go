package gang

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
)

// checkGang asserts what every gang must satisfy whatever its input: a minimum of at
// least one, nothing negative missing, and Members that are exactly the pods given.
func checkFuzzedGang(t *testing.T, g *Gang, pods int) {
	t.Helper()
	if g.MinMember < 1 {
		t.Fatalf("gang %s: MinMember %d < 1", g.ID, g.MinMember)
	}
	if g.MissingPods < 0 {
		t.Fatalf("gang %s: MissingPods %d < 0", g.ID, g.MissingPods)
	}
	if len(g.Members) != pods {
		t.Fatalf("gang %s: %d members, %d pods", g.ID, len(g.Members), pods)
	}
	if g.Present()+g.Counts.Failed+g.Counts.Terminating != pods {
		t.Fatalf("gang %s: counts %+v do not add up to %d pods", g.ID, g.Counts, pods)
	}
	// Starting with MissingPods == 0 means at least MinMember pods exist to start.
	if g.MissingPods == 0 && g.Present() < g.MinMember {
		t.Fatalf("gang %s: nothing missing but %d present of minimum %d", g.ID, g.Present(), g.MinMember)
	}
}

func fuzzPods(n uint8, states uint16, opts ...podOption) []*corev1.Pod {
	pods := make([]*corev1.Pod, int(n%12))
	for i := range pods {
		p := pod(fmt.Sprintf("p%d", i), i, opts...)
		switch (states >> (2 * (i % 8))) & 3 {
		case 1:
			p.Spec.NodeName, p.Status.Phase = "n", corev1.PodRunning
		case 2:
			p.Status.Phase = corev1.PodSucceeded
		case 3:
			p.Status.Phase = corev1.PodFailed
		}
		pods[i] = p
	}
	return pods
}

// FuzzPodGroupSpec feeds PodGroups with any minMember and sub-groups, and ad-hoc gangs
// with any gantry.dev/min-member text.
func FuzzPodGroupSpec(f *testing.F) {
	f.Add(int32(3), int32(1), int32(1), "3", uint8(4), uint16(0))
	f.Add(int32(-1), int32(-5), int32(7), "-2", uint8(2), uint16(0xffff))
	f.Add(int32(0), int32(0), int32(0), " 9999999999999999999 ", uint8(11), uint16(0x5555))
	f.Fuzz(func(t *testing.T, minMember, sub1, sub2 int32, annotation string, n uint8, states uint16) {
		sub := func(i int) podOption {
			return func(p *corev1.Pod) { p.Labels[names.LabelSubGroup] = []string{"a", "b", ""}[i%3] }
		}
		withPG := fuzzPods(n, states, func(p *corev1.Pod) { p.Annotations[names.AnnotationPodGroup] = "pg" })
		for i, p := range withPG {
			sub(i)(p)
		}
		pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "pg"}, Spec: schedulingv1alpha1.PodGroupSpec{
			MinMember: minMember, SubGroups: []schedulingv1alpha1.SubGroup{{Name: "a", MinMember: sub1}, {Name: "b", MinMember: sub2}}}}
		lookup, _ := NewStaticLookup(pg)
		for _, g := range Group(withPG, lookup) {
			checkFuzzedGang(t, g, len(withPG))
			if minMember > 0 && g.MinMember < int(minMember) {
				t.Fatalf("PodGroup minMember %d, gang minimum %d", minMember, g.MinMember)
			}
		}
		annotated := fuzzPods(n, states, func(p *corev1.Pod) {
			p.Annotations[names.AnnotationPodGroup] = "adhoc"
			p.Annotations[names.AnnotationMinMember] = annotation
		})
		for _, g := range Group(annotated, &StaticLookup{}) {
			checkFuzzedGang(t, g, len(annotated))
			if n, err := strconv.Atoi(strings.TrimSpace(annotation)); err == nil && n >= 1 {
				if g.MinMember != max(n, 1) {
					t.Fatalf("min-member %q gave a minimum of %d", annotation, g.MinMember)
				}
			} else if len(annotated) > 0 && len(g.Warnings) == 0 {
				// An unreadable annotation falls back to every pod, with a warning.
				t.Fatalf("unreadable min-member %q accepted without a warning", annotation)
			}
		}
	})
}

// FuzzRayClusterSpec feeds RayClusters with any replicas, minReplicas, numOfHosts and
// suspend flags, and checks that the gang's minimum counts every host of every
// replica the spec asks for.
func FuzzRayClusterSpec(f *testing.F) {
	f.Add(int32(2), int32(1), int32(1), false, false, uint8(4), uint16(0))
	f.Add(int32(-3), int32(-1), int32(-4), false, true, uint8(3), uint16(0xff))
	f.Add(int32(65536), int32(65536), int32(65536), false, false, uint8(5), uint16(0x55))
	f.Fuzz(func(t *testing.T, replicas, minReplicas, hosts int32, suspendGroup, suspendCluster bool, n uint8, states uint16) {
		rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "rc"}, Spec: rayv1.RayClusterSpec{
			Suspend: ptr.To(suspendCluster),
			WorkerGroupSpecs: []rayv1.WorkerGroupSpec{
				{GroupName: "gpu", Replicas: ptr.To(replicas), MinReplicas: ptr.To(minReplicas), NumOfHosts: hosts, Suspend: ptr.To(suspendGroup)},
				{GroupName: "cpu", Replicas: ptr.To(replicas)},
			}}}
		pods := fuzzPods(n, states, func(p *corev1.Pod) { p.Labels[names.LabelRayCluster] = "rc" })
		for i, p := range pods {
			if i == 0 {
				p.Labels[names.LabelRayNodeType] = names.RayNodeTypeHead
				continue
			}
			p.Labels[names.LabelRayNodeType] = names.RayNodeTypeWorker
			p.Labels[names.LabelRayGroup] = []string{"gpu", "cpu"}[i%2]
		}
		lookup, _ := NewStaticLookup(rc)
		for _, g := range Group(pods, lookup) {
			checkFuzzedGang(t, g, len(pods))
			want := int64(1) + max(int64(replicas), 0)
			if !suspendGroup {
				want += max(int64(minReplicas), 0) * max(int64(hosts), 1)
			}
			if want <= 1<<20 && int64(g.MinMember) != want {
				t.Fatalf("replicas %d minReplicas %d hosts %d suspend %v: minimum %d, want %d", replicas, minReplicas, hosts, suspendGroup, g.MinMember, want)
			}
			if want > 1<<20 && g.MissingPods == 0 {
				t.Fatalf("a cluster asking for %d pods starts with %d", want, g.Present())
			}
		}
	})
}

// FuzzRayClusterYAML reads RayCluster manifests as a user may write them (the seed's,
// mutated) and groups pods under them: nothing may panic.
func FuzzRayClusterYAML(f *testing.F) {
	for _, seed := range []string{"raycluster-train.yaml"} {
		c := loadSeedBytes(f, seed)
		f.Add(c, uint8(5))
	}
	f.Add([]byte("spec:\n  workerGroupSpecs:\n  - groupName: g\n    replicas: -1\n    numOfHosts: 0\n"), uint8(3))
	f.Fuzz(func(t *testing.T, manifest []byte, n uint8) {
		var rc rayv1.RayCluster
		if err := yaml.Unmarshal(manifest, &rc); err != nil {
			return
		}
		rc.Namespace, rc.Name = ns, "rc"
		pods := fuzzPods(n, 0, func(p *corev1.Pod) {
			p.Labels[names.LabelRayCluster] = "rc"
			p.Labels[names.LabelRayNodeType] = names.RayNodeTypeWorker
		})
		for i, g := range rc.Spec.WorkerGroupSpecs {
			if i < len(pods) {
				pods[i].Labels[names.LabelRayGroup] = g.GroupName
			}
		}
		lookup, _ := NewStaticLookup(&rc)
		for _, g := range Group(pods, lookup) {
			checkFuzzedGang(t, g, len(pods))
		}
	})
}

func loadSeedBytes(f *testing.F, file string) []byte {
	f.Helper()
	b, err := os.ReadFile("testdata/" + file)
	if err != nil {
		f.Fatal(err)
	}
	return b
}

// FuzzServeConfigV2 reads any text as a RayService's serveConfigV2, and the same text
// appended as another application after an engine that asks for 0.6. What must hold:
// the start-free fraction is 0 or in (0, 1] (never NaN); an application that cannot be
// read hides no other application's engine.
func FuzzServeConfigV2(f *testing.F) {
	f.Add("applications:\n- name: llms\n  args:\n    llm_configs:\n    - engine_kwargs:\n        gpu_memory_utilization: 0.75\n")
	f.Add("applications:\n- args: 5\n")
	f.Add("applications:\n- args:\n    llm_configs:\n    - engine_kwargs: {gpu_memory_utilization: \"0.5\"}\n")
	f.Add("applications:\n- args:\n    llm_configs:\n    - engine_kwargs: {gpu_memory_utilization: .nan}\n")
	f.Add(":::")
	f.Add("5") // appended: the second application of findings 10
	f.Fuzz(func(t *testing.T, doc string) {
		u := ServeGPUMemoryUtilization(doc)
		if u != 0 && !(u > 0 && u <= 1) {
			t.Fatalf("serveConfigV2 %q: start-free fraction %v", doc, u)
		}
		if strings.ContainsAny(doc, "\n\r\t{}[]&*!|>'\"%@`#,") {
			return // keep the appended application a plain YAML value
		}
		withEngine := "applications:\n- args:\n    llm_configs:\n    - engine_kwargs: {gpu_memory_utilization: 0.6}\n- args: " + doc + "\n"
		var any map[string]any
		if yaml.Unmarshal([]byte(withEngine), &any) != nil {
			return // a document that is not YAML at all is unreadable whole
		}
		if got := ServeGPUMemoryUtilization(withEngine); got < 0.6 {
			t.Fatalf("an application with args %q hides the engine asking 0.6: got %v", doc, got)
		}
	})
}
