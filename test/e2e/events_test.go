package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

// Every bind writes kube-scheduler's Scheduled Event on the pod ("Successfully
// assigned NS/POD to NODE", events.k8s.io, reported by the scheduler's name), and a
// PodGroup bound whole gets one Event of its own; a lone pod gets no gang Event.
func TestScheduledEventsForPodsAndPodGroup(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 0, "", 0), gpuNode(ns+"-b", 0, "", 0))
	pg := "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: PodGroup\nmetadata:\n  name: duo\nspec:\n  minMember: 2\n"
	if _, err := testenv.Apply(ctx, env.Config, ns, []byte(pg)); err != nil {
		t.Fatal(err)
	}
	createPods(t,
		newPod(ns, "m0", onTestNodes(t), withAnnotations(names.AnnotationPodGroup, "duo")),
		newPod(ns, "m1", onTestNodes(t), withAnnotations(names.AnnotationPodGroup, "duo")),
		newPod(ns, "lone", onTestNodes(t)))
	pods := waitPods(t, ns, 60*time.Second, "three pods bound", func(ps []corev1.Pod) bool { return bound(ps) == 3 })
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "scheduling.gantry.dev", Version: "v1alpha1", Resource: "podgroups"}
	u, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, "duo", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}

	var events []eventsv1.Event
	complete := func() bool {
		onPods, onGroup := 0, 0
		for _, e := range events {
			if e.Reason == "Scheduled" && e.Regarding.Kind == "Pod" {
				onPods++
			}
			if e.Reason == "Scheduled" && e.Regarding.Kind == "PodGroup" {
				onGroup++
			}
		}
		return onPods >= 3 && onGroup >= 1
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.EventsV1().Events(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		events = list.Items
		return complete(), nil
	})
	if err != nil {
		t.Fatalf("Scheduled Events not all written:\n%s", eventList(events))
	}
	for _, p := range pods {
		want := fmt.Sprintf("Successfully assigned %s/%s to %s", ns, p.Name, p.Spec.NodeName)
		n := 0
		for _, e := range events {
			if e.Regarding.Kind == "Pod" && e.Regarding.Name == p.Name && e.Reason == "Scheduled" {
				n++
				if e.Note != want || e.Type != corev1.EventTypeNormal || e.Action != "Binding" ||
					e.ReportingController != "gantry-scheduler" || e.Regarding.UID != p.UID {
					t.Errorf("pod %s: Event %+v; want Normal Scheduled/Binding %q by gantry-scheduler about the pod's UID", p.Name, e, want)
				}
			}
		}
		if n != 1 {
			t.Errorf("pod %s has %d Scheduled Events, want 1:\n%s", p.Name, n, eventList(events))
		}
	}
	groups := 0
	for _, e := range events {
		if e.Regarding.Kind != "PodGroup" {
			continue
		}
		groups++
		if e.Regarding.Name != "duo" || e.Regarding.UID != u.GetUID() || e.Reason != "Scheduled" ||
			!strings.HasPrefix(e.Note, "Successfully assigned 2 pods to ") {
			t.Errorf("PodGroup Event %+v; want one Scheduled Event about duo (uid %s) for its 2 pods", e, u.GetUID())
		}
	}
	if groups != 1 {
		t.Errorf("%d Events about the PodGroup, want 1:\n%s", groups, eventList(events))
	}
}

func eventList(events []eventsv1.Event) string {
	var b strings.Builder
	for _, e := range events {
		fmt.Fprintf(&b, "%s %s/%s %s %s: %s\n", e.Type, e.Regarding.Kind, e.Regarding.Name, e.Reason, e.ReportingController, e.Note)
	}
	return b.String()
}
