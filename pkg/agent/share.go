package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/names"
)

// ShareConfig is the opaque configuration a claim may give gpu.gantry.dev
// devices (spec.devices.config[].opaque.parameters):
//
//	{"apiVersion": "gpu.gantry.dev/v1alpha1", "kind": "GPUShareConfig", "enforcement": "Required"}
//
// Enforcement "Required" refuses to prepare a memory share that the node
// cannot enforce; "BestEffort" (the default) prepares it and says in the
// claim's status that it is not enforced.
type ShareConfig struct {
	APIVersion  string `json:"apiVersion"`
	Kind        string `json:"kind"`
	Enforcement string `json:"enforcement,omitempty"`
}

// The ShareConfig's names and values.
const (
	ShareConfigAPIVersion  = names.DriverName + "/v1alpha1"
	ShareConfigKind        = "GPUShareConfig"
	EnforcementRequired    = "Required"
	EnforcementBestEffort  = "BestEffort"
	ConditionShareEnforced = "MemoryShareEnforced"
)

// Enforcement of one prepared share, as the checkpoint records it.
const (
	enforcedByMPS = "mps"
	notEnforced   = "not enforced"
)

// shareConfig reads the claim's configuration for this driver; later
// entries win, as in NVIDIA's DRA driver. Unknown fields and values are
// errors that say what to write.
func shareConfig(claim *resourceapi.ResourceClaim) (ShareConfig, error) {
	cfg := ShareConfig{Enforcement: EnforcementBestEffort}
	if claim.Status.Allocation == nil {
		return cfg, nil
	}
	for _, c := range claim.Status.Allocation.Devices.Config {
		if c.Opaque == nil || c.Opaque.Driver != names.DriverName {
			continue
		}
		var got ShareConfig
		dec := json.NewDecoder(bytes.NewReader(c.Opaque.Parameters.Raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&got); err != nil {
			return cfg, fmt.Errorf("%s configuration %s: %w (write {\"apiVersion\": %q, \"kind\": %q, \"enforcement\": \"Required\"})",
				names.DriverName, c.Opaque.Parameters.Raw, err, ShareConfigAPIVersion, ShareConfigKind)
		}
		if got.APIVersion != ShareConfigAPIVersion || got.Kind != ShareConfigKind {
			return cfg, fmt.Errorf("%s configuration has apiVersion %q, kind %q: this driver reads apiVersion %q, kind %q",
				names.DriverName, got.APIVersion, got.Kind, ShareConfigAPIVersion, ShareConfigKind)
		}
		switch got.Enforcement {
		case "":
		case EnforcementRequired, EnforcementBestEffort:
			cfg.Enforcement = got.Enforcement
		default:
			return cfg, fmt.Errorf("%s configuration: enforcement %q is neither %q nor %q", names.DriverName, got.Enforcement, EnforcementRequired, EnforcementBestEffort)
		}
	}
	return cfg, nil
}

// isShare reports a device held in part: its memory share is what MPS
// must enforce. A whole GPU or MIG device needs no enforcement.
func (pd preparedDevice) isShare() bool { return pd.MemoryBytes < pd.TotalBytes }

// enforceShares runs the claim's MPS daemon with its limits and records
// on each share whether it is enforced; a claim that requires enforcement
// is refused when it cannot be had. It runs again on a kubelet retry and
// after an agent restart (Start is idempotent).
func (d *Driver) enforceShares(claim *resourceapi.ResourceClaim, cfg ShareConfig, devs []preparedDevice) error {
	var shares []mpsShare
	for _, pd := range devs {
		if pd.isShare() {
			shares = append(shares, mpsShare{UUID: pd.UUID, Bytes: pd.MemoryBytes})
		}
	}
	if len(shares) == 0 {
		return nil
	}
	how, why := enforcedByMPS, ""
	switch {
	case d.opts.MPS == nil:
		how, why = notEnforced, "the node agent runs without --mps"
	default:
		if err := d.opts.MPS.Start(claim.UID, shares); err != nil {
			how, why = notEnforced, err.Error()
			_ = d.opts.MPS.Stop(claim.UID)
		}
	}
	if how == notEnforced && cfg.Enforcement == EnforcementRequired {
		return fmt.Errorf("the claim requires enforced memory shares (%s enforcement %q), but they cannot be enforced on node %s: %s",
			ShareConfigKind, EnforcementRequired, d.opts.NodeName, why)
	}
	for i := range devs {
		if devs[i].isShare() {
			devs[i].Enforcement, devs[i].EnforcementReason = how, why
		}
	}
	return nil
}

// ClaimStatusWriter publishes, in the claim's status.devices, whether each
// memory share is enforced: a MemoryShareEnforced condition and the share
// in data. It needs update on resourceclaims/status.
type ClaimStatusWriter struct {
	Client kubernetes.Interface
}

// Write sets this driver's entries of the claim's status.devices.
func (w *ClaimStatusWriter) Write(ctx context.Context, claim *resourceapi.ResourceClaim, devs []preparedDevice) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := w.Client.ResourceV1().ResourceClaims(claim.Namespace).Get(ctx, claim.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.UID != claim.UID {
			return nil
		}
		statuses := slices.DeleteFunc(slices.Clone(cur.Status.Devices), func(s resourceapi.AllocatedDeviceStatus) bool {
			return s.Driver == names.DriverName
		})
		for _, pd := range devs {
			if pd.Enforcement == "" {
				continue
			}
			statuses = append(statuses, deviceStatus(cur, pd))
		}
		cur.Status.Devices = statuses
		_, err = w.Client.ResourceV1().ResourceClaims(cur.Namespace).UpdateStatus(ctx, cur, metav1.UpdateOptions{})
		return err
	})
}

func deviceStatus(claim *resourceapi.ResourceClaim, pd preparedDevice) resourceapi.AllocatedDeviceStatus {
	s := resourceapi.AllocatedDeviceStatus{Driver: names.DriverName, Pool: pd.Pool, Device: pd.Device}
	if pd.ShareID != nil {
		id := string(*pd.ShareID)
		s.ShareID = &id
	}
	cond := metav1.Condition{Type: ConditionShareEnforced, ObservedGeneration: claim.Generation}
	if pd.Enforcement == enforcedByMPS {
		cond.Status, cond.Reason = metav1.ConditionTrue, "MPSDaemonLimit"
		cond.Message = fmt.Sprintf("the claim's MPS control daemon limits each client process to %d MiB pinned on %s", pd.MemoryBytes>>20, pd.UUID)
	} else {
		cond.Status, cond.Reason = metav1.ConditionFalse, "NotEnforced"
		cond.Message = "not enforced: " + pd.EnforcementReason
	}
	meta.SetStatusCondition(&s.Conditions, cond)
	data, _ := json.Marshal(map[string]any{"memoryBytes": pd.MemoryBytes, "enforcement": pd.Enforcement, "uuid": pd.UUID})
	s.Data = &runtime.RawExtension{Raw: data}
	return s
}

// reportShares writes the claim's enforcement into its status; a failure is
// logged, the claim stays prepared (its containers also learn it from
// GANTRY_GPU_MEMORY_ENFORCED_<UUID>).
func (d *Driver) reportShares(ctx context.Context, claim *resourceapi.ResourceClaim, devs []preparedDevice) {
	if d.opts.ClaimStatus == nil || !slices.ContainsFunc(devs, preparedDevice.isShare) {
		return
	}
	if err := d.opts.ClaimStatus.Write(ctx, claim, devs); err != nil {
		klog.FromContext(ctx).Error(err, "Writing whether the claim's memory shares are enforced", "claim", klog.KObj(claim))
	}
}
