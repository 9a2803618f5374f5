package dispatch

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the CPU time the calling OS thread has used (RUSAGE_THREAD); the
// caller keeps its goroutine on the thread (runtime.LockOSThread) between two
// readings, so that their difference is the goroutine's CPU, its GC assists
// included.
func threadCPU() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_THREAD, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
