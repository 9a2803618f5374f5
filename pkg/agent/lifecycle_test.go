package agent

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/gpu/fake"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
)

type agentEnv struct {
	fleet                        *fake.Fleet
	dataDir, cdiRoot, driverRoot string
	kube                         *kubefake.Clientset
	status                       *StatusWriter
	statusClient                 interface {
		Get(context.Context, types.NamespacedName, *gpuv1alpha1.GPUNode) error
	}
	getStatus func() gpuv1alpha1.GPUNodeStatus
}

// newAgentEnv is a node with a fake fleet whose driver enforces Init (as
// the real NVML does), a fake driver root, and a fake API server.
func newAgentEnv(t *testing.T, profile string) *agentEnv {
	t.Helper()
	f, err := fake.New(profile, testNode)
	if err != nil {
		t.Fatal(err)
	}
	f.RequireInit()
	e := &agentEnv{fleet: f, dataDir: t.TempDir(), cdiRoot: t.TempDir(), driverRoot: t.TempDir(), kube: kubefake.NewClientset()}
	if _, err := f.DriverRoot(e.driverRoot); err != nil {
		t.Fatal(err)
	}
	var writes writeCounter
	c := newStatusClient(t, &writes)
	e.status = NewStatusWriter(c, testNode, StatusOptions{MinInterval: time.Nanosecond})
	e.getStatus = func() gpuv1alpha1.GPUNodeStatus {
		var obj gpuv1alpha1.GPUNode
		if err := c.Get(context.Background(), types.NamespacedName{Name: testNode}, &obj); err != nil {
			t.Fatal(err)
		}
		return obj.Status
	}
	return e
}

func (e *agentEnv) newAgent(t *testing.T) *Agent {
	t.Helper()
	a, err := New(Config{
		NodeName: testNode, KubeClient: e.kube, NVML: e.fleet,
		PluginDataDir: e.dataDir, RegistrarDir: t.TempDir(), CDIRoot: e.cdiRoot,
		CDI:         CDIOptions{DriverRoot: e.driverRoot},
		ReadTimeout: 200 * time.Millisecond, MaxFailures: 2, Status: e.status,
	})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// waitUnstuck waits for a reading stuck in a hung driver to return after
// the driver is back; the agent refuses to open NVML until then.
func waitUnstuck(a *Agent) {
	for i := 0; i < 5000; i++ {
		a.session.mu.Lock()
		inflight := a.session.inflight
		a.session.mu.Unlock()
		if !inflight {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

func staleCond(t *testing.T, st gpuv1alpha1.GPUNodeStatus) *metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, gpuv1alpha1.GPUNodeConditionStale)
	if c == nil {
		t.Fatalf("no Stale condition in %+v", st.Conditions)
	}
	return c
}

// A node whose NVML hangs mid-run: readings go stale everywhere (slices,
// GPUNode, metrics), NVML is closed after repeated failures, and a fresh
// session takes over once the driver answers again.
func TestNVMLDiesMidRunThenComesBack(t *testing.T) {
	e := newAgentEnv(t, "2xH100")
	a := e.newAgent(t)
	ctx := context.Background()
	if a.Snapshot().Get() == nil || a.Snapshot().Staleness().Stale || e.fleet.OpenCount() != 1 {
		t.Fatalf("start: live=%v stale=%+v open=%d", a.Snapshot().Get() != nil, a.Snapshot().Staleness(), e.fleet.OpenCount())
	}
	if _, err := os.Stat(cdiCommonSpecPath(e.cdiRoot)); err != nil {
		t.Fatalf("common CDI spec not written at NVML open: %v", err)
	}
	a.observe(ctx)
	if c := staleCond(t, e.getStatus()); c.Status != metav1.ConditionFalse {
		t.Errorf("live node has Stale=%s", c.Status)
	}

	e.fleet.SetDriverState(fake.DriverHung)
	a.Tick(ctx)
	st := a.Snapshot().Staleness()
	if !st.Stale || st.Reason != StaleNVMLNotAnswering {
		t.Fatalf("after a hung reading: %+v", st)
	}
	if e.fleet.OpenCount() != 1 {
		t.Errorf("NVML closed after one failure (MaxFailures 2)")
	}
	a.Tick(ctx) // second failure: NVML is closed
	if e.fleet.OpenCount() != 0 {
		t.Errorf("NVML still open after %d failures", a.failures)
	}
	if a.currentEditor() != nil {
		t.Error("CDI editor still available with NVML closed")
	}

	// Every consumer sees the staleness.
	devs := BuildResources(testNode, a.Snapshot().Get(), a.Snapshot().Staleness()).Pools[testNode].Slices[0].Devices
	if len(devs) != 2 || len(devs[0].Taints) != 1 || devs[0].Taints[0].Key != names.TaintStale {
		t.Errorf("stale slices %+v", devs)
	}
	a.observe(ctx)
	if c := staleCond(t, e.getStatus()); c.Status != metav1.ConditionTrue || c.Reason != StaleNVMLNotAnswering {
		t.Errorf("GPUNode Stale condition %+v", c)
	}
	for _, h := range a.Driver().healthReport().Devices {
		if h.Health != "Unknown" {
			t.Errorf("kubelet device health %s while stale: %+v", h.Health, h)
		}
	}
	fams := scrape(t, NewMetrics(testNode, a.Snapshot(), nil, nil))
	if _, ok := fams["DCGM_FI_DEV_FB_USED"]; ok {
		t.Error("stale memory served as a live DCGM series")
	}
	if v := value(find(t, fams, "gantry_gpu_nvml_up", nil)[0]); v != 0 {
		t.Errorf("gantry_gpu_nvml_up %v while stale", v)
	}
	find(t, fams, "gantry_gpu_sample_age_seconds", nil)

	// The driver answers again: a new session, live readings.
	inits := e.fleet.InitCount()
	e.fleet.SetDriverState(fake.DriverUp)
	waitUnstuck(a)
	a.Tick(ctx)
	if st := a.Snapshot().Staleness(); st.Stale {
		t.Fatalf("still stale after the driver came back: %+v", st)
	}
	if e.fleet.InitCount() <= inits || e.fleet.OpenCount() != 1 {
		t.Errorf("NVML inits %d then %d, open %d: want a second session", inits, e.fleet.InitCount(), e.fleet.OpenCount())
	}
	a.observe(ctx)
	if c := staleCond(t, e.getStatus()); c.Status != metav1.ConditionFalse {
		t.Errorf("GPUNode still Stale=%s", c.Status)
	}
	fams = scrape(t, NewMetrics(testNode, a.Snapshot(), nil, nil))
	if v := value(find(t, fams, "gantry_gpu_nvml_up", nil)[0]); v != 1 {
		t.Errorf("gantry_gpu_nvml_up %v when live", v)
	}
	find(t, fams, "DCGM_FI_DEV_FB_USED", nil)
}

// A GPU Operator driver upgrade: the agent lets go of NVML when the
// operator's state label says the old driver is being removed, serves
// Unprepare meanwhile, and takes NVML back when the new driver is in.
func TestDriverUpgradeReleasesNVML(t *testing.T) {
	e := newAgentEnv(t, "1xH100")
	a := e.newAgent(t)
	ctx := context.Background()
	claim := allocatedClaim("uid-1", "a", share{device: "gpu-0", memory: "10Gi", shareID: "x"})
	if r := prepare(t, a.Driver(), claim)[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}

	a.labels = &nodeLabels{labels: map[string]string{GPUOperatorUpgradeStateLabel: "pod-restart-required"}}
	a.Tick(ctx)
	if e.fleet.OpenCount() != 0 {
		t.Fatal("NVML still held during the driver upgrade")
	}
	if st := a.Snapshot().Staleness(); st.Reason != StaleDriverUpgrade {
		t.Errorf("staleness %+v", st)
	}
	e.fleet.SetDriverState(fake.DriverGone) // the old module is unloaded
	a.Tick(ctx)
	if e.fleet.OpenCount() != 0 {
		t.Fatal("NVML reopened while the upgrade runs")
	}
	if err := unprepare(t, a.Driver(), claim)[claim.UID]; err != nil {
		t.Fatalf("unprepare during the upgrade: %v", err)
	}

	e.fleet.SetDriverState(fake.DriverUp)
	a.labels = &nodeLabels{labels: map[string]string{GPUOperatorUpgradeStateLabel: "validation-required"}}
	a.Tick(ctx)
	if e.fleet.OpenCount() != 1 || a.Snapshot().Staleness().Stale {
		t.Fatalf("after the upgrade: open %d, staleness %+v", e.fleet.OpenCount(), a.Snapshot().Staleness())
	}
	if r := prepare(t, a.Driver(), claim)[claim.UID]; r.Err != nil {
		t.Fatalf("prepare after the upgrade: %v", r.Err)
	}
}

// The agent starts while the driver is away: no devices, Stale, and it
// still unprepares what an earlier run prepared.
func TestStartWithoutNVML(t *testing.T) {
	e := newAgentEnv(t, "1xH100")
	first := e.newAgent(t)
	claim := allocatedClaim("uid-1", "a", share{device: "gpu-0"})
	if r := prepare(t, first.Driver(), claim)[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	first.closeNVML()

	e.fleet.SetDriverState(fake.DriverGone)
	a := e.newAgent(t)
	st := a.Snapshot().Staleness()
	if a.Snapshot().Get() != nil || !st.Stale || st.Reason != StaleNVMLUnavailable || !strings.Contains(st.Message, "driver is not loaded") {
		t.Fatalf("start without a driver: inv %v, staleness %+v", a.Snapshot().Get() != nil, st)
	}
	if devs := BuildResources(testNode, a.Snapshot().Get(), st).Pools[testNode].Slices[0].Devices; len(devs) != 0 {
		t.Errorf("%d devices published without NVML", len(devs))
	}
	if err := unprepare(t, a.Driver(), claim)[claim.UID]; err != nil {
		t.Fatal(err)
	}
	if got := a.Driver().Allocations(); len(got) != 0 {
		t.Errorf("allocations left %+v", got)
	}
	e.fleet.SetDriverState(fake.DriverUp)
	a.Tick(context.Background())
	if a.Snapshot().Get() == nil || a.Snapshot().Staleness().Stale {
		t.Error("NVML not picked up once the driver is loaded")
	}
}

func TestReleaseRequested(t *testing.T) {
	for labels, want := range map[string]bool{
		"": false,
		GPUOperatorUpgradeStateLabel + "=upgrade-required":     false,
		GPUOperatorUpgradeStateLabel + "=drain-required":       true,
		GPUOperatorUpgradeStateLabel + "=pod-restart-required": true,
		GPUOperatorUpgradeStateLabel + "=validation-required":  false,
		GPUOperatorUpgradeStateLabel + "=upgrade-done":         false,
		ReleaseNVMLLabel + "=true":                             true,
	} {
		m := map[string]string{}
		if k, v, ok := strings.Cut(labels, "="); ok {
			m[k] = v
		}
		if got, why := ReleaseRequested(m); got != want || (got && why == "") {
			t.Errorf("%q: release %v (%q), want %v", labels, got, why, want)
		}
	}
}

// The agent reads its node's labels each tick and lets go of NVML when
// the operator's label appears.
func TestNodeLabelsAreRead(t *testing.T) {
	e := newAgentEnv(t, "1xH100")
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}}
	if _, err := e.kube.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	a := e.newAgent(t)
	a.cfg.WatchNode, a.labels = true, &nodeLabels{}
	ctx := context.Background()
	a.Tick(ctx)
	if e.fleet.OpenCount() != 1 {
		t.Fatal("NVML not held on an unlabelled node")
	}
	node.Labels = map[string]string{GPUOperatorUpgradeStateLabel: "drain-required"}
	if _, err := e.kube.CoreV1().Nodes().Update(ctx, node, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	a.Tick(ctx)
	if e.fleet.OpenCount() != 0 {
		t.Error("NVML held after the upgrade label appeared")
	}
}

func TestPCIeRootIsPublished(t *testing.T) {
	f, inv := discover(t, "2xH100")
	s := &nvmlSession{lib: f, pcieRoot: func(bus string) (string, error) {
		if bus == inv.Devices[1].PCIBusID {
			return "pci0000:40", nil
		}
		return "", os.ErrNotExist
	}}
	s.fillPCIeRoots(inv)
	devs := BuildResources(testNode, inv, Staleness{}).Pools[testNode].Slices[0].Devices
	if _, ok := devs[0].Attributes["resource.kubernetes.io/pcieRoot"]; ok {
		t.Error("unknown root published")
	}
	if v := devs[1].Attributes["resource.kubernetes.io/pcieRoot"].StringValue; v == nil || *v != "pci0000:40" {
		t.Errorf("pcieRoot %v", v)
	}
}
