// Package agent is the Gantry node agent: it turns the GPU inventory read by
// package gpu into DRA ResourceSlices of driver gpu.gantry.dev, serves the
// DRA kubelet plugin that prepares claims (CDI specs telling a container its
// GPU and its memory share), writes the node's GPUNode status, and exports
// DCGM-compatible Prometheus metrics.
//
// It talks to NVML only through package gpu and must not import the
// scheduler's packages: the agent reports facts, the scheduler decides.
package agent
