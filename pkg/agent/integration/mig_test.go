package integration

import (
	"context"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/agent"
)

// The real API server accepts the slice of an A100 node with one GPU in MIG
// mode: NVIDIA's attribute names and the MIG devices' capacities validate.
func TestMIGSliceIsAcceptedByTheAPIServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	f, err := fake.New("2xA100", "mig-node")
	if err != nil {
		t.Fatal(err)
	}
	if err := f.GPUs[1].EnableMIG(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.Discover(f)
	if err != nil {
		t.Fatal(err)
	}
	sl := slice("mig-node-gpu.gantry.dev", "mig-node")
	sl.Spec.Devices = agent.BuildResources("mig-node", inv, agent.Staleness{}).Pools["mig-node"].Slices[0].Devices
	got, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, sl, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("API server refused the MIG slice: %v", err)
	}
	defer env.Client.ResourceV1().ResourceSlices().Delete(context.Background(), got.Name, metav1.DeleteOptions{})
	profiles := map[string]bool{}
	for _, d := range got.Spec.Devices {
		if a := d.Attributes["type"]; a.StringValue != nil && *a.StringValue == agent.DeviceTypeMIG {
			profiles[*d.Attributes["profile"].StringValue] = true
		}
	}
	if len(got.Spec.Devices) != 4 || !profiles["3g.20gb"] || !profiles["2g.10gb"] || !profiles["1g.5gb"] {
		t.Errorf("stored slice has %d devices, MIG profiles %v; want gpu-0 and three MIG devices", len(got.Spec.Devices), profiles)
	}
}
