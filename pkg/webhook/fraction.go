package webhook

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// A gantry.dev/gpu-fraction share is a fraction of whichever GPU the pod gets, but a
// claim must name bytes. The webhook therefore asks for one of several subrequests
// (firstAvailable), one per GPU memory size the cluster's node agents publish, each
// with a selector on the device's memory capacity and that fraction of it: the
// structured allocator takes the first that can be allocated on a node, so the
// smallest GPU that fits comes first (the sizes are in ascending order), and the
// share it consumes is the fraction of the GPU it lands on.

// GPUSizes returns the distinct memory capacities (bytes a share can take, as the
// node agents publish them) of the gpu.gantry.dev GPUs in the cluster's
// ResourceSlices, in ascending order; none when no node publishes a Gantry GPU.
type GPUSizes func(ctx context.Context) ([]int64, error)

// SizesOf is GPUSizes over a list of ResourceSlices: whole GPUs (attribute type
// "gpu") of driver gpu.gantry.dev only, not MIG devices, which are booked whole.
func SizesOf(list []resourceapi.ResourceSlice) []int64 {
	var sizes []int64
	for _, sl := range list {
		if sl.Spec.Driver != names.DriverName {
			continue
		}
		for _, d := range sl.Spec.Devices {
			if t := d.Attributes["type"].StringValue; t == nil || *t != "gpu" {
				continue
			}
			if c, ok := d.Capacity[names.MemoryCapacity]; ok && c.Value.Value() > 0 {
				sizes = append(sizes, c.Value.Value())
			}
		}
	}
	slices.Sort(sizes)
	return slices.Compact(sizes)
}

// DynamicGPUSizes lists gpu.gantry.dev ResourceSlices (from the API server's watch
// cache) at most once per ttl; a failed list is not kept. It needs list on
// resourceslices, which the scheduler has.
func DynamicGPUSizes(dyn dynamic.Interface, ttl time.Duration) GPUSizes {
	gvr := schema.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: "resourceslices"}
	var (
		mu    sync.Mutex
		at    time.Time
		sizes []int64
	)
	return func(ctx context.Context) ([]int64, error) {
		mu.Lock()
		defer mu.Unlock()
		if !at.IsZero() && time.Since(at) < ttl {
			return sizes, nil
		}
		list, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{FieldSelector: "spec.driver=" + names.DriverName, ResourceVersion: "0"})
		if err != nil {
			return nil, fmt.Errorf("list %s ResourceSlices: %w", names.DriverName, err)
		}
		typed := make([]resourceapi.ResourceSlice, len(list.Items))
		for i := range list.Items {
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(list.Items[i].Object, &typed[i]); err != nil {
				return nil, err
			}
		}
		sizes, at = SizesOf(typed), time.Now()
		return sizes, nil
	}
}

// sizeRange is one subrequest's GPUs: memory capacity in [lo, hi), hi 0 for no bound.
type sizeRange struct{ lo, hi int64 }

// sizeRanges groups ascending sizes into at most the API's limit of subrequests.
// Each size is its own range while they fit; beyond that the two neighbouring ranges
// closest in size are merged (a share of a range is the fraction of its smallest
// GPU). Every range reaches up to the next, so a GPU of a size published later is
// served by the range below it.
func sizeRanges(sizes []int64) []sizeRange {
	lows := slices.Clone(sizes)
	for len(lows) > resourceapi.FirstAvailableDeviceRequestMaxSize {
		best := 1
		for i := 2; i < len(lows); i++ {
			// lows[i]/lows[i-1] < lows[best]/lows[best-1], without division.
			if float64(lows[i])*float64(lows[best-1]) < float64(lows[best])*float64(lows[i-1]) {
				best = i
			}
		}
		lows = slices.Delete(lows, best, best+1)
	}
	out := make([]sizeRange, len(lows))
	for i, lo := range lows {
		out[i].lo = lo
		if i+1 < len(lows) {
			out[i].hi = lows[i+1]
		}
	}
	return out
}

// FractionTemplateName is the template of a fraction (in thousandths) for these GPU
// sizes: its content is fixed by its name, so that two replicas, or two pods, make the
// same object, and a cluster whose GPU sizes change gets new templates.
func FractionTemplateName(milli int64, sizes []int64) string {
	if milli >= model.MilliPerGPU {
		return fmt.Sprintf("gantry-gpu-fraction-%d", model.MilliPerGPU)
	}
	h := fnv.New32a()
	for _, s := range sizes {
		fmt.Fprintf(h, "%d,", s)
	}
	return fmt.Sprintf("gantry-gpu-fraction-%d-%08x", milli, h.Sum32())
}

// FractionTemplate is the template behind FractionTemplateName: for a fraction below
// one, request "gpu" with one subrequest per range of GPU sizes, smallest first, each
// asking that fraction of its smallest GPU (rounded down to MiB); for a whole GPU,
// one gpu.gantry.dev device.
func FractionTemplate(namespace string, milli int64, sizes []int64) *resourceapi.ResourceClaimTemplate {
	t := &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: FractionTemplateName(milli, sizes),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "gantry"}},
	}
	if milli >= model.MilliPerGPU {
		t.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: names.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}}}
		return t
	}
	var subs []resourceapi.DeviceSubRequest
	for _, r := range sizeRanges(sizes) {
		share := r.lo * milli / model.MilliPerGPU >> 20 << 20
		subs = append(subs, resourceapi.DeviceSubRequest{
			Name:            fmt.Sprintf("mib-%d", r.lo>>20),
			DeviceClassName: names.DriverName,
			Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: sizeSelector(r)}}},
			AllocationMode:  resourceapi.DeviceAllocationModeExactCount,
			Count:           1,
			Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				names.MemoryCapacity: *resource.NewQuantity(share, resource.BinarySI)}},
		})
	}
	t.Spec.Spec.Devices.Requests = []resourceapi.DeviceRequest{{Name: "gpu", FirstAvailable: subs}}
	return t
}

// sizeSelector is the CEL selector of the whole GPUs in a size range.
func sizeSelector(r sizeRange) string {
	mem := fmt.Sprintf("device.capacity[%q].%s", names.DriverName, names.MemoryCapacity)
	s := fmt.Sprintf("device.attributes[%q].type == \"gpu\" && %s.compareTo(quantity(%q)) >= 0",
		names.DriverName, mem, resource.NewQuantity(r.lo, resource.BinarySI).String())
	if r.hi > 0 {
		s += fmt.Sprintf(" && %s.compareTo(quantity(%q)) < 0", mem, resource.NewQuantity(r.hi, resource.BinarySI).String())
	}
	return s
}
