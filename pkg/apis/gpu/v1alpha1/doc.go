// Package v1alpha1 is the gpu.gantry.dev/v1alpha1 API: GPUNode, the live state
// of one node's GPUs as its node agent measures them (memory as NVML reports
// it, processes, health, and when it was measured).
//
// The node agent writes it; the scheduler reads it to check live free memory
// (vLLM refuses to start below gpu_memory_utilization × total). It depends
// only on apimachinery.
//
// +kubebuilder:object:generate=true
// +groupName=gpu.gantry.dev
package v1alpha1
