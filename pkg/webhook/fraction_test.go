package webhook

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
)

// KAI's gpu-fraction becomes a claim whose one request lists a subrequest per GPU
// size the node agents publish, smallest first, each asking that fraction of its
// GPU's memory (rounded down to MiB) from whole GPUs of that size only.
func TestGPUFractionAnnotationBecomesAClaim(t *testing.T) {
	rec := &recordTemplates{}
	pod := annotatedPod(map[string]string{names.AnnotationGPUFraction: "0.5"})
	req := sharePodRequest(t, pod)
	resp := PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(a100, h100)}.Review(context.Background(), req)
	got := applied(t, req, resp)
	if len(rec.made) != 1 {
		t.Fatalf("templates made %d, want 1", len(rec.made))
	}
	tmpl := rec.made[0]
	if tmpl.Namespace != "team-a" || tmpl.Name != FractionTemplateName(500, []int64{a100, h100}) {
		t.Errorf("template %s/%s", tmpl.Namespace, tmpl.Name)
	}
	if len(got.Spec.ResourceClaims) != 1 || ptr.Deref(got.Spec.ResourceClaims[0].ResourceClaimTemplateName, "") != tmpl.Name ||
		len(got.Spec.Containers[0].Resources.Claims) != 1 {
		t.Errorf("pod claims %+v, container claims %+v", got.Spec.ResourceClaims, got.Spec.Containers[0].Resources.Claims)
	}
	reqs := tmpl.Spec.Spec.Devices.Requests
	if len(reqs) != 1 || reqs[0].Exactly != nil || len(reqs[0].FirstAvailable) != 2 {
		t.Fatalf("requests %+v, want one with two subrequests", reqs)
	}
	for i, size := range []int64{a100, h100} {
		sub := reqs[0].FirstAvailable[i]
		e := &resourceapi.ExactDeviceRequest{Capacity: sub.Capacity}
		if sub.DeviceClassName != names.DriverName || sub.Count != 1 || dra.RequestedMemory(e) != size/2 {
			t.Errorf("subrequest %d: %+v, want one %s device with %d bytes", i, sub, names.DriverName, size/2)
		}
		if len(sub.Selectors) != 1 || !strings.Contains(sub.Selectors[0].CEL.Expression, `.type == "gpu"`) {
			t.Errorf("subrequest %d selectors %+v: want whole GPUs of one size", i, sub.Selectors)
		}
	}
	// The A100's range ends where the H100's begins; the H100's is open above.
	if e := reqs[0].FirstAvailable[0].Selectors[0].CEL.Expression; !strings.Contains(e, "< 0") {
		t.Errorf("smallest range %q is not bounded above", e)
	}
	if e := reqs[0].FirstAvailable[1].Selectors[0].CEL.Expression; strings.Contains(e, "< 0") {
		t.Errorf("largest range %q is bounded above", e)
	}
	// A third of an H100, rounded down to MiB.
	third := FractionTemplate("ns", 333, []int64{h100}).Spec.Spec.Devices.Requests[0].FirstAvailable[0]
	if q := third.Capacity.Requests[names.MemoryCapacity]; q.Value() != h100*333/1000>>20<<20 || q.Value()%(1<<20) != 0 {
		t.Errorf("a third of an H100 asks %s", q.String())
	}
	// A fraction of 1 is a whole GPU, whatever the sizes.
	whole := FractionTemplate("ns", 1000, []int64{a100, h100})
	if r := whole.Spec.Spec.Devices.Requests; len(r) != 1 || r[0].Exactly == nil || dra.RequestedMemory(r[0].Exactly) != 0 ||
		whole.Name != FractionTemplateName(1000, nil) {
		t.Errorf("fraction 1: %s %+v, want one whole GPU", whole.Name, r)
	}
}

// Template names follow their content: the same fraction and sizes give the same
// name, other sizes another.
func TestFractionTemplateNames(t *testing.T) {
	a := FractionTemplateName(250, []int64{a100, h100})
	if a != FractionTemplateName(250, []int64{a100, h100}) || a == FractionTemplateName(250, []int64{h100}) ||
		a == FractionTemplateName(500, []int64{a100, h100}) {
		t.Errorf("names do not follow content: %s", a)
	}
}

// More sizes than the API allows subrequests: the closest neighbours share one, and
// every size is still served, by the range whose smallest GPU is at most its size.
func TestSizeRangesFitTheAPILimit(t *testing.T) {
	var sizes []int64
	for gib := int64(10); gib <= 120; gib += 10 {
		sizes = append(sizes, gib<<30)
	}
	sizes = append(sizes, 41<<30)
	slices.Sort(sizes)
	rs := sizeRanges(sizes)
	if len(rs) != resourceapi.FirstAvailableDeviceRequestMaxSize {
		t.Fatalf("%d ranges, want %d", len(rs), resourceapi.FirstAvailableDeviceRequestMaxSize)
	}
	for _, s := range sizes {
		n := 0
		for _, r := range rs {
			if s >= r.lo && (r.hi == 0 || s < r.hi) {
				n++
			}
		}
		if n != 1 {
			t.Errorf("size %d GiB is in %d ranges", s>>30, n)
		}
	}
	if slices.ContainsFunc(rs, func(r sizeRange) bool { return r.lo == 41<<30 }) {
		t.Errorf("41 GiB, next to 40 GiB, kept its own range: %+v", rs)
	}
}

// Sizes come from whole Gantry GPUs: not MIG devices, not other drivers.
func TestSizesOf(t *testing.T) {
	dev := func(typ string, mem int64) resourceapi.Device {
		return resourceapi.Device{Name: "d", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To(typ)}},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{names.MemoryCapacity: {Value: *resource.NewQuantity(mem, resource.BinarySI)}}}
	}
	list := []resourceapi.ResourceSlice{
		{Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, Devices: []resourceapi.Device{dev("gpu", h100), dev("mig", 20<<30), dev("gpu", a100)}}},
		{Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, Devices: []resourceapi.Device{dev("gpu", h100)}}},
		{Spec: resourceapi.ResourceSliceSpec{Driver: "gpu.nvidia.com", Devices: []resourceapi.Device{dev("gpu", 24<<30)}}},
	}
	if got := SizesOf(list); !slices.Equal(got, []int64{a100, h100}) {
		t.Errorf("sizes %v, want [%d %d]", got, int64(a100), int64(h100))
	}
}

// The sizes are listed once per ttl, and a failed list is not kept: the next
// admission asks again.
func TestDynamicGPUSizesCaches(t *testing.T) {
	scheme := runtime.NewScheme()
	_ = resourceapi.AddToScheme(scheme)
	gpuDev := resourceapi.Device{Name: "gpu-0", Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"type": {StringValue: ptr.To("gpu")}},
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{names.MemoryCapacity: {Value: *resource.NewQuantity(h100, resource.BinarySI)}}}
	sl := &resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n-gpu"}, Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, Devices: []resourceapi.Device{gpuDev}}}
	dyn := dynamicfake.NewSimpleDynamicClient(scheme, sl)
	lists, fail := 0, true
	dyn.PrependReactor("list", "resourceslices", func(clienttesting.Action) (bool, runtime.Object, error) {
		lists++
		if fail {
			return true, nil, errors.New("unavailable")
		}
		return false, nil, nil
	})
	sizes := DynamicGPUSizes(dyn, time.Hour)
	if _, err := sizes(context.Background()); err == nil {
		t.Fatal("a failed list gave sizes")
	}
	fail = false
	for range 3 {
		got, err := sizes(context.Background())
		if err != nil || !slices.Equal(got, []int64{h100}) {
			t.Fatalf("sizes %v, %v", got, err)
		}
	}
	if lists != 2 {
		t.Errorf("%d lists, want 2 (the failed one, then one kept for the ttl)", lists)
	}
}
