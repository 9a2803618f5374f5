// Package gpu is Gantry's device layer: it reads the GPUs of one machine
// through NVML into a plain device model (identity, memory, MIG, PCI, NVLink,
// utilization, health) and classifies their health.
//
// It must not depend on Kubernetes: the node agent (pkg/agent) translates this
// model into ResourceSlices, GPUNode status and metrics. Every NVML call that
// a driver or a GPU does not support degrades to "unknown" in the model
// instead of failing discovery, because one missing sensor must not hide a
// GPU from the scheduler.
package gpu
