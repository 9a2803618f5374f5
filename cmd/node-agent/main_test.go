package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestMissingDriverIsOneClearLine(t *testing.T) {
	var out, errOut bytes.Buffer
	code := run([]string{"--smoke", "--nvml-library=/nonexistent/libnvidia-ml.so.1"}, &out, &errOut)
	if code == 0 {
		t.Fatal("exit code 0 without a driver")
	}
	msg := errOut.String()
	if strings.Count(msg, "\n") != 1 || !strings.Contains(msg, "libnvidia-ml.so.1 not found") || !strings.Contains(msg, "--fake-gpus") {
		t.Errorf("stderr %q: want one line naming the library and the way out", msg)
	}
}

func TestSmokeOnFakeGPUs(t *testing.T) {
	var out, errOut bytes.Buffer
	if code := run([]string{"--smoke", "--fake-gpus=1xA10G", "--node-name=n1"}, &out, &errOut); code != 0 {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"1 GPU(s)", "NVIDIA A10G", "Ampere", "Healthy", `DCGM_FI_DEV_FB_USED{DCGM_FI_DRIVER_VERSION="550.54.15",Hostname="n1"`} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{{"--fake-gpus=9xNOPE", "--smoke"}, {"--fake-gpus=1xA10G"}} {
		var out, errOut bytes.Buffer
		if code := run(args, &out, &errOut); code == 0 || errOut.Len() == 0 {
			t.Errorf("%v: exit %d, stderr %q", args, code, errOut.String())
		}
	}
}
