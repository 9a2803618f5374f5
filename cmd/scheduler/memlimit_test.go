package main

import (
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"
)

func cgroupFile(t *testing.T, root, file, content string) {
	t.Helper()
	path := filepath.Join(root, file)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCgroupMemoryLimit(t *testing.T) {
	for _, tt := range []struct {
		name, file, content string
		want                int64
		err                 bool
	}{
		{"v2 limit", "memory.max", "2147483648\n", 2 << 30, false},
		{"v2 no limit", "memory.max", "max\n", 0, false},
		{"v1 limit", "memory/memory.limit_in_bytes", "1073741824\n", 1 << 30, false},
		{"v1 unlimited", "memory/memory.limit_in_bytes", "9223372036854771712\n", 0, false},
		{"garbage", "memory.max", "lots\n", 0, true},
		{"no cgroup files", "unrelated", "", 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			root := t.TempDir()
			cgroupFile(t, root, tt.file, tt.content)
			got, err := cgroupMemoryLimit(root)
			if (err != nil) != tt.err || got != tt.want {
				t.Fatalf("cgroupMemoryLimit = %d, %v; want %d, error %v", got, err, tt.want, tt.err)
			}
		})
	}
}

// The soft limit is 90 % of the container's (2 GiB here: 1,932,735,283 B), unless
// GOMEMLIMIT says otherwise.
func TestSetMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	root := t.TempDir()
	cgroupFile(t, root, "memory.max", "2147483648\n")
	noEnv := func(string) (string, bool) { return "", false }

	debug.SetMemoryLimit(1 << 62)
	msg := setMemoryLimit(root, noEnv)
	if got, want := debug.SetMemoryLimit(-1), int64(1932735283); got != want {
		t.Fatalf("soft limit %d, want %d (%s)", got, want, msg)
	}
	if !strings.Contains(msg, "1843 MiB") {
		t.Errorf("log line %q does not say the limit", msg)
	}

	debug.SetMemoryLimit(1 << 62)
	msg = setMemoryLimit(root, func(k string) (string, bool) { return "off", k == "GOMEMLIMIT" })
	if got := debug.SetMemoryLimit(-1); got != 1<<62 {
		t.Fatalf("with GOMEMLIMIT set the soft limit became %d (%s)", got, msg)
	}

	cgroupFile(t, root, "memory.max", "max\n")
	msg = setMemoryLimit(root, noEnv)
	if got := debug.SetMemoryLimit(-1); got != 1<<62 {
		t.Fatalf("without a container limit the soft limit became %d (%s)", got, msg)
	}
}
