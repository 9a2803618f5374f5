package placement

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

const gib = int64(1) << 30

func TestFeasible(t *testing.T) {
	h100 := func(mutate ...func(*model.Node)) *model.Node {
		n := gpuNode("node-a", 4, "H100", 80*gib)
		n.Labels["zone"] = "a"
		for _, m := range mutate {
			m(n)
		}
		return n
	}
	allocate := func(gpu int, bytes int64) func(*model.Node) {
		return func(n *model.Node) {
			n.GPUs[gpu].AllocatedBytes += bytes
			n.GPUs[gpu].Sharers++
		}
	}
	hold := func(gpus ...int) func(*model.Node) {
		return func(n *model.Node) {
			for _, g := range gpus {
				n.GPUs[g].AllocatedBytes, n.GPUs[g].Exclusive = n.GPUs[g].MemoryBytes, true
			}
		}
	}
	fillAllBut := func(gpu int, bytes int64) func(*model.Node) {
		return func(n *model.Node) {
			for g := range n.GPUs {
				if g != gpu {
					n.GPUs[g].AllocatedBytes, n.GPUs[g].Exclusive = n.GPUs[g].MemoryBytes, true
				}
			}
			n.GPUs[gpu].AllocatedBytes = bytes
		}
	}
	withModels := func(p *model.Pod, models ...string) *model.Pod { p.GPU.Models = models; return p }
	withTolerations := func(p *model.Pod, tolerations ...corev1.Toleration) *model.Pod {
		p.Tolerations = tolerations
		return p
	}
	taint := func(key string, effect corev1.TaintEffect) func(*model.Node) {
		return func(n *model.Node) { n.Taints = append(n.Taints, corev1.Taint{Key: key, Value: "x", Effect: effect}) }
	}
	zoneAffinity := func(p *model.Pod, zone string) *model.Pod {
		p.RequiredAffinity = &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{zone}}},
		}}}
		return p
	}
	live := func(gpu int, free int64) func(*model.Node) {
		return func(n *model.Node) { n.GPUs[gpu].LiveFreeBytes = free }
	}
	startFree := func(p *model.Pod, fraction float64) *model.Pod { p.GPU.StartFreeFraction = fraction; return p }

	tests := []struct {
		name   string
		node   *model.Node
		pod    *model.Pod
		reason string // "" when the pod fits
	}{
		{"whole GPU on an idle node", h100(), gpuPod("p", 1, 1000, gib), ""},
		{"all four GPUs", h100(), gpuPod("p", 4, 1000, gib), ""},
		{"more GPUs than idle", h100(hold(0, 1)), gpuPod("p", 3, 1000, gib), ReasonFreeGPUs},
		{"whole GPU never onto a shared GPU", h100(fillAllBut(0, 1)), gpuPod("p", 1, 1000, gib), ReasonFreeGPUs},
		{"share fits next to another share", h100(allocate(0, 40*gib)), memSharePod("p", 40*gib), ""},
		{"shares may fill a GPU to exactly 100%", h100(fillAllBut(0, 60*gib)), memSharePod("p", 20*gib), ""},
		{"shares never above 100% of a GPU", h100(fillAllBut(0, 60*gib)), memSharePod("p", 20*gib+1), ReasonGPUMemory},
		{"share larger than any GPU", h100(), memSharePod("p", 81*gib), ReasonGPUMemory},
		{"fraction share above what is left", h100(fillAllBut(0, 48*gib)), sharePod("p", 500, 1000, gib), ReasonGPUMemory},
		{"fraction share within what is left", h100(fillAllBut(0, 40*gib)), sharePod("p", 500, 1000, gib), ""},
		{"share never onto a GPU held whole", h100(hold(0, 1, 2, 3)), memSharePod("p", gib), ReasonGPUMemory},
		{"accepted model", h100(), withModels(gpuPod("p", 1, 1000, gib), "A100", "H100"), ""},
		{"model not accepted", h100(), withModels(gpuPod("p", 1, 1000, gib), "A100"), ReasonGPUModel},
		{"share of a model not accepted", h100(), withModels(memSharePod("p", gib), "L4"), ReasonGPUModel},
		{"unhealthy GPU is never used whole", h100(fillAllBut(0, 0), func(n *model.Node) { n.GPUs[0].Healthy = false }), gpuPod("p", 1, 1000, gib), ReasonFreeGPUs},
		{"unhealthy GPU is never shared", h100(fillAllBut(0, 0), func(n *model.Node) { n.GPUs[0].Healthy = false }), memSharePod("p", gib), ReasonGPUMemory},
		{"count-only node takes whole GPUs", h100(func(n *model.Node) { n.GPUsByCountOnly = true }), gpuPod("p", 2, 1000, gib), ""},
		{"count-only node takes no share", h100(func(n *model.Node) { n.GPUsByCountOnly = true }), memSharePod("p", gib), ReasonSharesNeedAgent},
		{"live free memory below the share", h100(fillAllBut(0, 0), live(0, 10*gib)), memSharePod("p", 20*gib), ReasonLiveGPUMemory},
		{"live free memory enough for the share", h100(fillAllBut(0, 0), live(0, 30*gib)), memSharePod("p", 20*gib), ""},
		{"start fraction above live free memory", h100(fillAllBut(0, 0), live(0, 60*gib)), startFree(memSharePod("p", 20*gib), 0.9), ReasonLiveGPUMemory},
		{"start fraction on a whole GPU", h100(fillAllBut(0, 0), live(0, 60*gib)), startFree(gpuPod("p", 1, 1000, gib), 0.9), ReasonLiveGPUMemory},
		{"whole GPU ignores driver-reserved memory", h100(fillAllBut(0, 0), live(0, 79*gib)), gpuPod("p", 1, 1000, gib), ""},
		{"unknown live memory does not block", h100(fillAllBut(0, 0)), startFree(memSharePod("p", 20*gib), 0.9), ""},
		{"untolerated NoSchedule taint", h100(taint("dedicated", corev1.TaintEffectNoSchedule)), gpuPod("p", 1, 1000, gib), ReasonTaint},
		{"untolerated NoExecute taint", h100(taint("dedicated", corev1.TaintEffectNoExecute)), gpuPod("p", 1, 1000, gib), ReasonTaint},
		{"PreferNoSchedule does not block", h100(taint("dedicated", corev1.TaintEffectPreferNoSchedule)), gpuPod("p", 1, 1000, gib), ""},
		{"tolerated taint", h100(taint("dedicated", corev1.TaintEffectNoSchedule)),
			withTolerations(gpuPod("p", 1, 1000, gib), corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpExists}), ""},
		{"required affinity matches", h100(), zoneAffinity(gpuPod("p", 1, 1000, gib), "a"), ""},
		{"required affinity does not match", h100(), zoneAffinity(gpuPod("p", 1, 1000, gib), "b"), ReasonAffinity},
		{"node selector does not match", h100(), func() *model.Pod {
			p := gpuPod("p", 1, 1000, gib)
			p.NodeSelector = map[string]string{"zone": "b"}
			return p
		}(), ReasonAffinity},
		{"cordoned node", h100(func(n *model.Node) { n.Unschedulable = true }), gpuPod("p", 1, 1000, gib), ReasonCordoned},
		{"cordoned node, pod tolerates it", h100(func(n *model.Node) { n.Unschedulable = true }),
			withTolerations(gpuPod("p", 1, 1000, gib), corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists}), ""},
		{"insufficient CPU", h100(), gpuPod("p", 1, 65000, gib), ReasonCPU},
		{"insufficient memory", h100(), gpuPod("p", 1, 1000, 513*gib), ReasonMemory},
		{"no pod slots left", h100(func(n *model.Node) { n.Requested.Pods = 110 }), gpuPod("p", 1, 1000, gib), ReasonTooManyPods},
		{"CPU-only pod on a GPU node", h100(), cpuPod("p", 1000, gib), ""},
		{"GPU pod on a CPU node", gpuNode("cpu", 0, "", 0), gpuPod("p", 1, 1000, gib), ReasonNoGPU},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ok, reason := Feasible(tt.node, tt.pod)
			if tt.reason == "" {
				if !ok {
					t.Fatalf("Feasible = false (%s), want true", reason)
				}
				return
			}
			if ok {
				t.Fatalf("Feasible = true, want false because %q", tt.reason)
			}
			if !strings.HasPrefix(reason, tt.reason) {
				t.Fatalf("reason = %q, want it to start with %q", reason, tt.reason)
			}
		})
	}
}

func TestFeasibleReasonsAreWords(t *testing.T) {
	n := gpuNode("node-a", 2, "H100", 80*gib)
	n.GPUs[0].AllocatedBytes, n.GPUs[1].AllocatedBytes = 70*gib, 60*gib
	_, reason := Feasible(n, memSharePod("p", 30*gib))
	want := "insufficient GPU memory: needs a 30 GiB share of 1 GPU, the most free on one GPU is 20 GiB"
	if reason != want {
		t.Fatalf("reason = %q, want %q", reason, want)
	}
}

func TestDescribeDemand(t *testing.T) {
	tests := []struct {
		pod  *model.Pod
		want string
	}{
		{gpuPod("p", 1, 0, 0), "1 GPU"},
		{gpuPod("p", 2, 0, 0), "2 GPUs"},
		{func() *model.Pod { p := gpuPod("p", 1, 0, 0); p.GPU.Models = []string{"H100"}; return p }(), "1 H100"},
		{memSharePod("p", 20*gib), "a 20 GiB share of 1 GPU"},
		{sharePod("p", 250, 0, 0), "a 0.25 share of 1 GPU"},
		{cpuPod("p", 4000, 16*gib), "4 CPUs and 16 GiB memory"},
		{cpuPod("p", 1000, 2*gib), "1 CPU and 2 GiB memory"},
	}
	for _, tt := range tests {
		if got := DescribeDemand(tt.pod); got != tt.want {
			t.Errorf("DescribeDemand = %q, want %q", got, tt.want)
		}
	}
}
