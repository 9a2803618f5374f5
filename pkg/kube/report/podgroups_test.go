package report

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

const testScheduler = "gantry-scheduler"

// A PodGroup of three with one pod: WaitingForPods at first, GangIncomplete once it
// has waited longer than the incomplete-gang timeout, as its pods say.
func TestPodGroupStatusSaysGangIncomplete(t *testing.T) {
	pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "job", Generation: 1},
		Spec: schedulingv1alpha1.PodGroupSpec{MinMember: 3}}
	lookup, err := gang.NewStaticLookup(pg)
	if err != nil {
		t.Fatal(err)
	}
	c := cache.New([]string{testScheduler}, lookup, "")
	c.SetTimeouts(cache.Timeouts{Incomplete: time.Minute})
	c.UpsertPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w0", UID: types.UID("uid-w0"),
			Annotations: map[string]string{names.AnnotationPodGroup: "job"}},
		Spec: corev1.PodSpec{SchedulerName: testScheduler, Containers: []corev1.Container{{Name: "c",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{names.ExtendedGPUResource: resource.MustParse("1")}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	})
	s, err := scheduler.New("bestfit", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	pending := map[model.GangID]scheduler.Pending{}
	r := New(c, s, nil, nil, nil, func(id model.GangID) (scheduler.Pending, bool) { pd, ok := pending[id]; return pd, ok })
	id := model.GangID("podgroup:ns/job")
	cycle := func(now time.Time) {
		prep := c.Prepare(context.Background(), now, s.ScheduleSkipping)
		for _, pd := range c.Commit(prep.Plan, now).Pending {
			pending[pd.Gang] = pd.Pending
		}
	}

	cycle(time.Now())
	st := r.podGroupStatus(id, pg)
	if len(st.Conditions) != 1 || st.Conditions[0].Reason != names.ReasonPodGroupWaitingForPods {
		t.Fatalf("before the timeout: conditions %+v, want reason %s", st.Conditions, names.ReasonPodGroupWaitingForPods)
	}
	missing := st.Conditions[0].Message

	cycle(time.Now().Add(time.Hour))
	st = r.podGroupStatus(id, pg)
	cond := st.Conditions[0]
	if st.Phase != schedulingv1alpha1.PodGroupPending || cond.Status != metav1.ConditionFalse || cond.Reason != names.ReasonPodGroupIncomplete {
		t.Fatalf("after the timeout: phase %s, condition %+v, want Pending and Scheduled=False reason %s", st.Phase, cond, names.ReasonPodGroupIncomplete)
	}
	if !strings.Contains(cond.Message, "1m0s") || !strings.Contains(cond.Message, missing) {
		t.Errorf("message %q does not say the timeout and what is missing (%q)", cond.Message, missing)
	}
	if st.Pending != 1 {
		t.Errorf("pending members = %d, want 1", st.Pending)
	}
}
