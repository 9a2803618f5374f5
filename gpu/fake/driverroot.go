package fake

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Device node numbers of the NVIDIA driver: /dev/nvidiaN and /dev/nvidiactl
// are major 195; nvidia-uvm's major is assigned at load time (commonly 510
// or 235), nvidia-caps likewise.
const (
	nvidiaMajor = 195
	uvmMajor    = 510
	capsMajor   = 511
)

// DriverRoot lays out, under dir, the files NVIDIA's container toolkit looks
// for when it generates CDI specs for this fleet: versioned driver libraries
// with their SONAME links, nvidia-smi, GSP firmware, and device nodes
// (/dev/nvidiaN, nvidiactl, nvidia-uvm, nvidia-uvm-tools, and the MIG
// capability nodes). Device nodes are real character devices when the
// process may create them (root, CAP_MKNOD), empty files otherwise;
// realNodes says which.
func (f *Fleet) DriverRoot(dir string) (realNodes bool, err error) {
	version, ret := f.SystemGetDriverVersion()
	if ret != 0 {
		return false, fmt.Errorf("fleet has no driver version: %v", ret)
	}
	libdir := filepath.Join(dir, "usr/lib/x86_64-linux-gnu")
	for _, lib := range []string{"libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so", "libnvidia-nvvm.so", "libcudadebugger.so"} {
		if err := writeFile(filepath.Join(libdir, lib+"."+version), "ELF"); err != nil {
			return false, err
		}
		if err := os.Symlink(lib+"."+version, filepath.Join(libdir, lib+".1")); err != nil && !os.IsExist(err) {
			return false, err
		}
	}
	for _, file := range []string{"usr/bin/nvidia-smi", "usr/bin/nvidia-debugdump", "lib/firmware/nvidia/" + version + "/gsp_ga10x.bin"} {
		if err := writeFile(filepath.Join(dir, file), "x"); err != nil {
			return false, err
		}
	}
	nodes := map[string][2]uint32{
		"dev/nvidiactl":        {nvidiaMajor, 255},
		"dev/nvidia-uvm":       {uvmMajor, 0},
		"dev/nvidia-uvm-tools": {uvmMajor, 1},
		"dev/nvidia-modeset":   {nvidiaMajor, 254},
	}
	for i := range f.GPUs {
		nodes[fmt.Sprintf("dev/nvidia%d", i)] = [2]uint32{nvidiaMajor, uint32(i)}
	}
	// MIG: one capability node per GPU instance and compute instance, and
	// the table the driver publishes mapping them to minor numbers.
	minors := "config 1\nmonitor 2\n"
	for i := range f.GPUs {
		for gi := 0; gi < 15; gi++ {
			giMinor := 3 + i*200 + gi*10
			minors += fmt.Sprintf("gpu%d/gi%d/access %d\n", i, gi, giMinor)
			nodes[fmt.Sprintf("dev/nvidia-caps/nvidia-cap%d", giMinor)] = [2]uint32{capsMajor, uint32(giMinor)}
			for ci := 0; ci < 8; ci++ {
				ciMinor := giMinor + 1 + ci
				minors += fmt.Sprintf("gpu%d/gi%d/ci%d/access %d\n", i, gi, ci, ciMinor)
				nodes[fmt.Sprintf("dev/nvidia-caps/nvidia-cap%d", ciMinor)] = [2]uint32{capsMajor, uint32(ciMinor)}
			}
		}
	}
	if err := writeFile(filepath.Join(dir, "proc/driver/nvidia-caps/mig-minors"), minors); err != nil {
		return false, err
	}
	realNodes = true
	for path, mm := range nodes {
		p := filepath.Join(dir, path)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return false, err
		}
		if realNodes {
			err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(mm[0], mm[1])))
			if err == nil || os.IsExist(err) {
				continue
			}
			realNodes = false
		}
		if err := writeFile(p, ""); err != nil {
			return false, err
		}
	}
	return realNodes, nil
}

func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}
