package placement

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

func gpuPod(name string, gpus int, milliCPU, memory int64) *model.Pod {
	return &model.Pod{
		ID:       model.PodID("ns/" + name),
		Requests: model.Resources{MilliCPU: milliCPU, MemoryBytes: memory},
		GPU:      model.GPUDemand{Count: gpus},
	}
}

func sharePod(name string, milli, milliCPU, memory int64) *model.Pod {
	p := gpuPod(name, 1, milliCPU, memory)
	p.GPU.FractionMilli = milli
	return p
}

func memSharePod(name string, bytes int64) *model.Pod {
	p := gpuPod(name, 1, 1000, 1<<30)
	p.GPU.MemoryBytes = bytes
	return p
}

func cpuPod(name string, milliCPU, memory int64) *model.Pod {
	return &model.Pod{ID: model.PodID("ns/" + name), Requests: model.Resources{MilliCPU: milliCPU, MemoryBytes: memory}}
}

// gpuNode is a node with n idle GPUs of the given model and memory, 64 cores,
// 512 GiB and 110 pod slots.
func gpuNode(name string, n int, gpuModel string, memory int64) *model.Node {
	node := &model.Node{
		Name:        name,
		Labels:      map[string]string{"kubernetes.io/hostname": name},
		Allocatable: model.Resources{MilliCPU: 64000, MemoryBytes: 512 << 30, Pods: 110},
	}
	for i := 0; i < n; i++ {
		node.GPUs = append(node.GPUs, model.GPU{
			Index: i, UUID: fmt.Sprintf("%s-%d", name, i), Model: gpuModel,
			MemoryBytes: memory, LiveFreeBytes: model.UnknownBytes, Healthy: true,
		})
	}
	return node
}

func snapshotOf(nodes ...*model.Node) *model.Snapshot {
	s := model.NewSnapshot()
	for _, n := range nodes {
		s.AddNode(n)
	}
	return s
}

func taintNoSchedule(key string) corev1.Taint {
	return corev1.Taint{Key: key, Effect: corev1.TaintEffectNoSchedule}
}
