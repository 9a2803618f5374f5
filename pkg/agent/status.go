package agent

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/gpu"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
)

// StatusOptions tune how often GPUNode status is written.
type StatusOptions struct {
	// MinInterval is the floor between two writes, however much changes
	// (default 10s): a training job's memory moves constantly and must not
	// turn every node into a write stream.
	MinInterval time.Duration
	// MaxInterval forces a write when nothing meaningful changed, so that
	// sampleTime shows the agent is alive (default 5m).
	MaxInterval time.Duration
	// MemoryChange is the smallest change of a GPU's used or free memory that
	// is worth a write (default 256Mi, the smallest share a claim can take).
	MemoryChange int64
}

// StatusWriter writes the node's GPUNode status when it changed meaningfully.
type StatusWriter struct {
	client   client.Client
	nodeName string
	opts     StatusOptions
	now      func() time.Time

	lastStatus *gpuv1alpha1.GPUNodeStatus
	lastWrite  time.Time
}

// NewStatusWriter writes GPUNode nodeName through c (whose scheme must know
// gpu.gantry.dev/v1alpha1 and core/v1).
func NewStatusWriter(c client.Client, nodeName string, opts StatusOptions) *StatusWriter {
	if opts.MinInterval <= 0 {
		opts.MinInterval = 10 * time.Second
	}
	if opts.MaxInterval <= 0 {
		opts.MaxInterval = 5 * time.Minute
	}
	if opts.MemoryChange <= 0 {
		opts.MemoryChange = MinMemoryShare.Value()
	}
	return &StatusWriter{client: c, nodeName: nodeName, opts: opts, now: time.Now}
}

// Observe takes a new reading and writes it if it differs meaningfully from
// the last one written and the floor interval has passed. A change held back
// by the floor is written by a later Observe, because it is still a change
// compared with what was last written.
func (w *StatusWriter) Observe(ctx context.Context, inv *gpu.Inventory, stale Staleness) error {
	var status gpuv1alpha1.GPUNodeStatus
	if inv != nil {
		status = StatusFromInventory(inv)
	}
	status.Conditions = w.conditions(stale)
	now := w.now()
	since := now.Sub(w.lastWrite)
	if w.lastStatus != nil {
		// Going stale or live again is written at once: the scheduler acts on it.
		staleChanged := staleCondition(w.lastStatus) != staleCondition(&status)
		if since < w.opts.MinInterval && !staleChanged {
			return nil
		}
		if !staleChanged && !MeaningfulChange(w.lastStatus, &status, w.opts.MemoryChange) && since < w.opts.MaxInterval {
			return nil
		}
	}
	if err := w.write(ctx, status); err != nil {
		return err
	}
	w.lastStatus, w.lastWrite = &status, now
	return nil
}

func (w *StatusWriter) write(ctx context.Context, status gpuv1alpha1.GPUNodeStatus) error {
	var obj gpuv1alpha1.GPUNode
	err := w.client.Get(ctx, types.NamespacedName{Name: w.nodeName}, &obj)
	if apierrors.IsNotFound(err) {
		obj = gpuv1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: w.nodeName}}
		// Owned by the Node, so that deleting the node removes its GPUNode.
		var node corev1.Node
		if err := w.client.Get(ctx, types.NamespacedName{Name: w.nodeName}, &node); err == nil {
			obj.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Node", Name: node.Name, UID: node.UID}}
		}
		if err := w.client.Create(ctx, &obj); err != nil {
			return fmt.Errorf("create GPUNode %s: %w", w.nodeName, err)
		}
	} else if err != nil {
		return fmt.Errorf("get GPUNode %s: %w", w.nodeName, err)
	}
	obj.Status = status
	if err := w.client.Status().Update(ctx, &obj); err != nil {
		return fmt.Errorf("update GPUNode %s status: %w", w.nodeName, err)
	}
	return nil
}

// conditions carries the Stale condition over from the last write, so
// that its transition time moves only when its status does.
func (w *StatusWriter) conditions(stale Staleness) []metav1.Condition {
	var conds []metav1.Condition
	if w.lastStatus != nil {
		conds = append(conds, w.lastStatus.Conditions...)
	}
	c := metav1.Condition{Type: gpuv1alpha1.GPUNodeConditionStale, Status: metav1.ConditionFalse,
		Reason: "Live", Message: "NVML answers; values are live"}
	if stale.Stale {
		c.Status, c.Reason = metav1.ConditionTrue, stale.Reason
		c.Message = fmt.Sprintf("no live reading since %s: %s", stale.Since.UTC().Format(time.RFC3339), stale.Message)
	}
	meta.SetStatusCondition(&conds, c)
	return conds
}

func staleCondition(st *gpuv1alpha1.GPUNodeStatus) string {
	if c := meta.FindStatusCondition(st.Conditions, gpuv1alpha1.GPUNodeConditionStale); c != nil {
		return string(c.Status) + "/" + c.Reason
	}
	return ""
}

// StatusFromInventory is the GPUNode status for one reading.
func StatusFromInventory(inv *gpu.Inventory) gpuv1alpha1.GPUNodeStatus {
	st := gpuv1alpha1.GPUNodeStatus{
		SampleTime:        metav1.NewTime(inv.SampledAt),
		DriverVersion:     inv.DriverVersion,
		CUDADriverVersion: inv.CUDADriverVersion,
		GPUCount:          int32(len(inv.Devices)),
	}
	for _, d := range inv.Devices {
		if d.UUID == "" {
			continue // the list is keyed by UUID; such a GPU shows only in GPUCount
		}
		g := gpuv1alpha1.GPUStatus{
			UUID:          d.UUID,
			Index:         int32(d.Index),
			Device:        DeviceName(d.Index),
			ProductName:   d.ProductName,
			Health:        gpuv1alpha1.Health(d.Health.State),
			HealthReasons: d.Health.Reasons,
		}
		if g.Health == "" {
			g.Health = gpuv1alpha1.HealthUnknown
		}
		if g.Health == gpuv1alpha1.Healthy {
			st.HealthyCount++
		}
		if d.Memory.Known {
			g.MemoryTotal = bytesQuantity(d.Memory.TotalBytes)
			g.MemoryUsed = bytesQuantity(d.Memory.UsedBytes)
			g.MemoryFree = bytesQuantity(d.Memory.FreeBytes)
			if d.Memory.ReservedBytes != nil {
				g.MemoryReserved = bytesQuantity(*d.Memory.ReservedBytes)
			}
		}
		if d.UtilizationPercent != nil {
			g.UtilizationPercent = ptr.To(int32(*d.UtilizationPercent))
		}
		for _, p := range d.Processes {
			g.Processes = append(g.Processes, gpuv1alpha1.GPUProcess{PID: int64(p.PID), MemoryUsed: *bytesQuantity(p.UsedBytes), MIGDevice: p.MIGDeviceUUID})
		}
		for _, m := range d.MIG.Devices {
			ms := gpuv1alpha1.MIGDeviceStatus{UUID: m.UUID, Profile: m.Profile}
			if m.Memory.Known {
				ms.MemoryTotal = bytesQuantity(m.Memory.TotalBytes)
				ms.MemoryUsed = bytesQuantity(m.Memory.UsedBytes)
			}
			g.MIG = append(g.MIG, ms)
		}
		st.GPUs = append(st.GPUs, g)
	}
	return st
}

func bytesQuantity(b uint64) *resource.Quantity {
	return resource.NewQuantity(int64(b), resource.BinarySI)
}

// MeaningfulChange reports whether new differs from old in something the
// scheduler or an operator acts on: the set of GPUs, health, processes, MIG
// layout, driver, or a GPU's used or free memory by at least memoryChange
// bytes. Utilization and sample time alone are not (metrics carry those).
func MeaningfulChange(old, new *gpuv1alpha1.GPUNodeStatus, memoryChange int64) bool {
	if old.DriverVersion != new.DriverVersion || old.GPUCount != new.GPUCount || len(old.GPUs) != len(new.GPUs) {
		return true
	}
	for i := range new.GPUs {
		o, n := &old.GPUs[i], &new.GPUs[i]
		if o.UUID != n.UUID || o.Health != n.Health || !equality.Semantic.DeepEqual(o.HealthReasons, n.HealthReasons) {
			return true
		}
		if !sameProcesses(o.Processes, n.Processes) || !equality.Semantic.DeepEqual(migLayout(o.MIG), migLayout(n.MIG)) {
			return true
		}
		if quantityMoved(o.MemoryUsed, n.MemoryUsed, memoryChange) || quantityMoved(o.MemoryFree, n.MemoryFree, memoryChange) ||
			quantityMoved(o.MemoryTotal, n.MemoryTotal, 1) {
			return true
		}
	}
	return false
}

func sameProcesses(a, b []gpuv1alpha1.GPUProcess) bool {
	if len(a) != len(b) {
		return false
	}
	pids := map[int64]bool{}
	for _, p := range a {
		pids[p.PID] = true
	}
	for _, p := range b {
		if !pids[p.PID] {
			return false
		}
	}
	return true
}

func migLayout(ms []gpuv1alpha1.MIGDeviceStatus) []string {
	var out []string
	for _, m := range ms {
		out = append(out, m.UUID+"/"+m.Profile)
	}
	return out
}

func quantityMoved(a, b *resource.Quantity, threshold int64) bool {
	if (a == nil) != (b == nil) {
		return true
	}
	if a == nil {
		return false
	}
	d := a.Value() - b.Value()
	return d >= threshold || -d >= threshold
}
