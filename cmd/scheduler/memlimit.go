package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
)

// memoryLimitShare is the part of the container's memory limit that the Go runtime
// is told it may use (its soft limit); the rest is for what the runtime does not
// count against it (thread stacks, the binary, page-cache slack) and its overshoot.
const memoryLimitShare = 0.9

// cgroupRoot is where the container's own cgroup is mounted.
const cgroupRoot = "/sys/fs/cgroup"

// setMemoryLimit gives the Go runtime a soft memory limit of 90 % of the container's
// memory limit, unless GOMEMLIMIT is set (the runtime has read it then; GOMEMLIMIT=off
// keeps no limit). Without a limit the collector lets the heap grow to twice what is
// live (GOGC=100) whatever the container allows, and a spike (the first list of a
// large cluster, a burst of pods) can cross a memory limit the live heap is far below:
// the kubelet then kills the scheduler. With one, the collector runs more often as the
// heap nears it instead. Go 1.26 derives GOMAXPROCS from the cgroup, not GOMEMLIMIT.
// It returns what it did, for the log.
func setMemoryLimit(root string, getenv func(string) (string, bool)) string {
	if v, ok := getenv("GOMEMLIMIT"); ok {
		return fmt.Sprintf("GOMEMLIMIT=%s set: soft memory limit left as it says", v)
	}
	limit, err := cgroupMemoryLimit(root)
	switch {
	case err != nil:
		return fmt.Sprintf("no soft memory limit: reading the container's memory limit: %v", err)
	case limit == 0:
		return "no soft memory limit: the container has no memory limit"
	}
	soft := int64(float64(limit) * memoryLimitShare)
	debug.SetMemoryLimit(soft)
	return fmt.Sprintf("soft memory limit %d MiB: %.0f%% of the container's memory limit (%d MiB); set GOMEMLIMIT to choose another, or GOMEMLIMIT=off for none",
		soft>>20, memoryLimitShare*100, limit>>20)
}

// cgroupMemoryLimit reads the memory limit of the cgroup mounted at root: cgroup v2's
// memory.max, else cgroup v1's memory/memory.limit_in_bytes. 0 means no limit ("max",
// v1's near-2^63 "unlimited", or neither file).
func cgroupMemoryLimit(root string) (int64, error) {
	for _, file := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, file))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return 0, err
		}
		v := strings.TrimSpace(string(b))
		if v == "max" {
			return 0, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Errorf("%s: %q is not a number of bytes", filepath.Join(root, file), v)
		}
		if n >= 1<<62 { // cgroup v1 writes "unlimited" as the largest page multiple
			return 0, nil
		}
		return n, nil
	}
	return 0, nil
}
