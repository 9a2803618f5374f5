package agent

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
	"sigs.k8s.io/controller-runtime/pkg/client/interceptor"

	"github.com/gantry-dev/gantry/gpu"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
)

func TestStatusFromInventory(t *testing.T) {
	f, _ := discover(t, "dgxh100")
	f.GPUs[1].SetRemappedRows(true, false)
	if err := f.GPUs[0].SetMemoryUsed(5 << 30); err != nil {
		t.Fatal(err)
	}
	st := StatusFromInventory(mustRediscover(t, f))
	if st.GPUCount != 8 || st.HealthyCount != 7 || len(st.GPUs) != 8 || st.DriverVersion != "550.54.15" {
		t.Fatalf("status %+v", st)
	}
	g := st.GPUs[0]
	if g.Device != "gpu-0" || g.MemoryTotal.Value() != 80<<30 || g.MemoryUsed.Value() != 5<<30 ||
		g.MemoryFree.Value() != 80<<30-5<<30-g.MemoryReserved.Value() || g.Health != gpuv1alpha1.Healthy {
		t.Errorf("GPU 0 %+v", g)
	}
	if h := st.GPUs[1]; h.Health != gpuv1alpha1.Unhealthy || len(h.HealthReasons) != 1 {
		t.Errorf("GPU 1 %+v", h)
	}
}

// writeCounter counts status writes reaching the API.
type writeCounter struct{ n int }

func newStatusClient(t *testing.T, counter *writeCounter) client.Client {
	scheme := runtime.NewScheme()
	if err := gpuv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	return fake.NewClientBuilder().WithScheme(scheme).WithStatusSubresource(&gpuv1alpha1.GPUNode{}).
		WithInterceptorFuncs(interceptor.Funcs{
			SubResourceUpdate: func(ctx context.Context, c client.Client, sub string, obj client.Object, opts ...client.SubResourceUpdateOption) error {
				counter.n++
				return c.SubResource(sub).Update(ctx, obj, opts...)
			},
		}).Build()
}

func TestStatusWriterWritesOnlyMeaningfulChanges(t *testing.T) {
	f, _ := discover(t, "2xA10G")
	var writes writeCounter
	c := newStatusClient(t, &writes)
	w := NewStatusWriter(c, testNode, StatusOptions{MinInterval: 10 * time.Second, MaxInterval: 5 * time.Minute})
	clock := time.Unix(1_000_000, 0)
	w.now = func() time.Time { return clock }
	ctx := context.Background()

	step := func(advance time.Duration, change func()) {
		t.Helper()
		clock = clock.Add(advance)
		if change != nil {
			change()
		}
		if err := w.Observe(ctx, mustRediscover(t, f), Staleness{}); err != nil {
			t.Fatal(err)
		}
	}
	used := func(b uint64) func() {
		return func() {
			if err := f.GPUs[0].SetMemoryUsed(b); err != nil {
				t.Fatal(err)
			}
		}
	}

	steps := []struct {
		name       string
		advance    time.Duration
		change     func()
		wantWrites int
	}{
		{"first reading creates the object", 0, nil, 1},
		{"nothing changed", 30 * time.Second, nil, 1},
		{"utilization alone is not meaningful", 30 * time.Second, func() { f.GPUs[0].SetUtilization(99, 50) }, 1},
		{"memory moved less than 256Mi", 30 * time.Second, used(100 << 20), 1},
		{"memory moved 1Gi", 30 * time.Second, used(1 << 30), 2},
		{"another change inside the floor interval waits", 2 * time.Second, used(4 << 30), 2},
		{"and is written once the floor has passed", 10 * time.Second, nil, 3},
		{"health change", 15 * time.Second, func() { f.GPUs[1].SetUncorrectableECC(1) }, 4},
		{"heartbeat after MaxInterval", 5 * time.Minute, nil, 5},
	}
	for _, s := range steps {
		step(s.advance, s.change)
		if writes.n != s.wantWrites {
			t.Fatalf("%s: %d writes, want %d", s.name, writes.n, s.wantWrites)
		}
	}
	var obj gpuv1alpha1.GPUNode
	if err := c.Get(ctx, types.NamespacedName{Name: testNode}, &obj); err != nil {
		t.Fatal(err)
	}
	if obj.Status.GPUs[0].MemoryUsed.Value() != 4<<30 || obj.Status.GPUs[1].Health != gpuv1alpha1.Unhealthy {
		t.Errorf("stored status %+v", obj.Status.GPUs)
	}
}

func TestMeaningfulChangeIgnoresSampleTime(t *testing.T) {
	_, inv := discover(t, "1xL4")
	a := StatusFromInventory(inv)
	later := *inv
	later.SampledAt = inv.SampledAt.Add(time.Minute)
	b := StatusFromInventory(&later)
	if MeaningfulChange(&a, &b, MinMemoryShare.Value()) {
		t.Error("a new sample time alone was taken as a change")
	}
	var empty gpu.Inventory
	c := StatusFromInventory(&empty)
	if !MeaningfulChange(&a, &c, MinMemoryShare.Value()) {
		t.Error("losing every GPU was not a change")
	}
}
