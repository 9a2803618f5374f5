package report

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// reportPodGroups writes each PodGroup's phase, member counts and Scheduled
// condition, whose message is the reason the scheduler gave for leaving the gang
// pending; its reason is typed (names.ReasonPodGroup*), GangIncomplete once the gang
// has waited longer than allowed for members that do not exist. Only changes are
// written.
func (r *StatusReporter) reportPodGroups(ctx context.Context) {
	if r.podGroups == nil || r.pending == nil {
		return
	}
	for key, pg := range r.podGroups() {
		ns, name, _ := strings.Cut(key, "/")
		id := model.GangID("podgroup:" + key)
		st := r.podGroupStatus(id, pg)
		r.writePodGroup(ctx, ns, name, st)
	}
}

func (r *StatusReporter) podGroupStatus(id model.GangID, pg *schedulingv1alpha1.PodGroup) schedulingv1alpha1.PodGroupStatus {
	st := schedulingv1alpha1.PodGroupStatus{ObservedGeneration: pg.Generation}
	st.Pending, st.Running, st.Succeeded, st.Failed = countsAsInt32(r.cache.MemberCounts(id))
	minimum := pg.Spec.MinMember
	cond := metav1.Condition{Type: names.ConditionPodGroupScheduled, ObservedGeneration: pg.Generation}
	switch {
	case st.Running+st.Succeeded >= minimum && st.Running > 0:
		st.Phase = schedulingv1alpha1.PodGroupRunning
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, names.ReasonPodGroupScheduled, "the gang's minimum is bound"
	case st.Succeeded >= minimum && minimum > 0:
		st.Phase = schedulingv1alpha1.PodGroupSucceeded
		cond.Status, cond.Reason, cond.Message = metav1.ConditionTrue, names.ReasonPodGroupScheduled, "the gang's minimum has succeeded"
	default:
		st.Phase = schedulingv1alpha1.PodGroupPending
		cond.Status, cond.Reason = metav1.ConditionFalse, names.ReasonPodGroupUnschedulable
		cond.Message = "waiting for the next scheduling cycle"
		if pd, ok := r.pending(id); ok {
			cond.Reason, cond.Message = podGroupReason(pd), pd.Reason
		}
		if timeout, overdue := r.cache.IncompleteOverdue(id); overdue {
			// The same fact the gang's pods carry (PodScheduled=False, GangIncomplete).
			cond.Reason = names.ReasonPodGroupIncomplete
			cond.Message = fmt.Sprintf("incomplete for more than %s (incompleteGangTimeout): %s", timeout, cond.Message)
		}
	}
	st.Conditions = []metav1.Condition{cond}
	return st
}

func podGroupReason(pd scheduler.Pending) string {
	switch pd.Kind {
	case scheduler.PendingIncomplete:
		return names.ReasonPodGroupWaitingForPods
	case scheduler.PendingQueueLimit:
		return names.ReasonPodGroupOverQueueLimit
	case scheduler.PendingQueueNotLeaf:
		return names.ReasonPodGroupQueueNotLeaf
	case scheduler.PendingQueueNotFound:
		return names.ReasonPodGroupQueueNotFound
	default:
		return names.ReasonPodGroupUnschedulable
	}
}

func (r *StatusReporter) writePodGroup(ctx context.Context, ns, name string, st schedulingv1alpha1.PodGroupStatus) {
	key, _ := json.Marshal(st)
	cacheKey := "podgroup/" + ns + "/" + name
	if r.last[cacheKey] == string(key) {
		return
	}
	for i := range st.Conditions {
		st.Conditions[i].LastTransitionTime = metav1.Now()
	}
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return
	}
	if _, err := r.dyn.Resource(gvr.PodGroup).Namespace(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		klog.V(2).InfoS("Write PodGroup status", "podgroup", ns+"/"+name, "err", err)
		return
	}
	r.last[cacheKey] = string(key)
}

func countsAsInt32(pending, running, succeeded, failed int) (int32, int32, int32, int32) {
	return int32(pending), int32(running), int32(succeeded), int32(failed)
}
