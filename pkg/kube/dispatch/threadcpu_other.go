//go:build !linux

package dispatch

import "time"

// threadCPU is not measured outside Linux: the Cycle line's cpuMicros is then 0.
func threadCPU() time.Duration { return 0 }
