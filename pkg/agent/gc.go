package agent

import (
	"context"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
)

// CheckpointGC unprepares claims that the checkpoint holds but the API no
// longer has, after a grace period. A lost Unprepare (the kubelet crashed,
// the pod was force-deleted while the agent was down) would otherwise keep
// the claim's memory booked on the GPU forever.
type CheckpointGC struct {
	Client kubernetes.Interface
	// Grace is how long a claim must be seen missing before it is
	// collected (default 5m): the kubelet's own Unprepare comes first.
	Grace time.Duration
	// Interval between two passes (default 1m).
	Interval time.Duration

	now          func() time.Time
	lastRun      time.Time
	missingSince map[types.UID]time.Time
}

// Collect runs a pass if Interval has passed and returns the claims it
// unprepared.
func (g *CheckpointGC) Collect(ctx context.Context, d *Driver) []types.UID {
	if g.now == nil {
		g.now = time.Now
	}
	if g.Grace <= 0 {
		g.Grace = 5 * time.Minute
	}
	if g.Interval <= 0 {
		g.Interval = time.Minute
	}
	if g.missingSince == nil {
		g.missingSince = map[types.UID]time.Time{}
	}
	now := g.now()
	if !g.lastRun.IsZero() && now.Sub(g.lastRun) < g.Interval {
		return nil
	}
	g.lastRun = now
	logger := klog.FromContext(ctx)
	var expired []kubeletplugin.NamespacedObject
	seen := map[types.UID]bool{}
	for _, ref := range d.preparedClaims() {
		seen[ref.UID] = true
		claim, err := g.Client.ResourceV1().ResourceClaims(ref.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		switch {
		case err == nil && claim.UID == ref.UID:
			delete(g.missingSince, ref.UID)
			continue
		case err != nil && !apierrors.IsNotFound(err):
			logger.V(2).Info("Cannot check prepared claim; keeping it", "claim", ref.NamespacedName, "err", err)
			continue
		}
		// Not found, or a new claim with the same name.
		first, ok := g.missingSince[ref.UID]
		if !ok {
			g.missingSince[ref.UID] = now
			continue
		}
		if now.Sub(first) >= g.Grace {
			expired = append(expired, ref)
		}
	}
	for uid := range g.missingSince {
		if !seen[uid] {
			delete(g.missingSince, uid)
		}
	}
	if len(expired) == 0 {
		return nil
	}
	results, err := d.UnprepareResourceClaims(ctx, expired)
	if err != nil {
		logger.Error(err, "Collecting stale prepared claims failed")
		return nil
	}
	var done []types.UID
	for _, ref := range expired {
		if results[ref.UID] == nil {
			logger.Info("Unprepared a claim that no longer exists", "claim", ref.NamespacedName, "uid", ref.UID)
			delete(g.missingSince, ref.UID)
			done = append(done, ref.UID)
		}
	}
	sort.Slice(done, func(i, j int) bool { return done[i] < done[j] })
	return done
}

// preparedClaims lists the checkpoint's claims.
func (d *Driver) preparedClaims() []kubeletplugin.NamespacedObject {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]kubeletplugin.NamespacedObject, 0, len(d.cp.Claims))
	for uid, c := range d.cp.Claims {
		out = append(out, kubeletplugin.NamespacedObject{
			NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: uid,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out
}
