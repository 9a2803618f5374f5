package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/sandbox"
)

func init() {
	register(command{
		name:    "explain",
		summary: "why a pod is where it is, or why it waits: gantry explain POD [-n NAMESPACE]",
		run:     func(ctx context.Context, args []string) error { return runExplain(ctx, args, os.Stdout, os.Stderr) },
	})
}

func runExplain(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry explain", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("n", "default", "namespace of the pod")
	kubeconfig := fs.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig (default $KUBECONFIG, else the running sandbox's)")
	// Accept the pod name before or after the flags, as kubectl does.
	var name string
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if name == "" {
		return usageError{"usage: gantry explain POD [-n NAMESPACE]"}
	}
	cfg, err := explainConfig(*kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	pod, err := client.CoreV1().Pods(*ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Pod %s/%s (schedulerName %s)\n", pod.Namespace, pod.Name, pod.Spec.SchedulerName)
	switch {
	case pod.Spec.NodeName != "":
		fmt.Fprintf(stdout, "  bound to %s", pod.Spec.NodeName)
		if g := pod.Annotations["gantry.dev/gpus"]; g != "" {
			fmt.Fprintf(stdout, ", GPUs %s (index[:bytes of a share])", g)
		}
		fmt.Fprintf(stdout, "; phase %s\n", pod.Status.Phase)
	case pod.Status.NominatedNodeName != "":
		fmt.Fprintf(stdout, "  pending; nominated to %s while preempted pods leave\n", pod.Status.NominatedNodeName)
	default:
		fmt.Fprintln(stdout, "  pending")
	}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			fmt.Fprintf(stdout, "  why it waits: %s\n", c.Message)
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			fmt.Fprintf(stdout, "  being evicted: %s\n", c.Message)
		}
	}
	if len(pod.Spec.SchedulingGates) > 0 {
		gates := make([]string, len(pod.Spec.SchedulingGates))
		for i, g := range pod.Spec.SchedulingGates {
			gates[i] = g.Name
		}
		fmt.Fprintf(stdout, "  held by scheduling gates: %s\n", strings.Join(gates, ", "))
	}
	explainClaims(ctx, client, pod, stdout)
	if g, err := gangOf(ctx, cfg, client, pod); err == nil && g != nil {
		fmt.Fprintf(stdout, "Gang %s (%s)\n", g.ID, g.Source)
		fmt.Fprintf(stdout, "  must start together: %d; queue %q; priority class %q\n", g.MinMember, g.Queue, g.PriorityClassName)
		fmt.Fprintf(stdout, "  members: %d pending, %d running, %d succeeded, %d terminating\n", g.Counts.Pending, g.Counts.Running, g.Counts.Succeeded, g.Counts.Terminating)
		if g.Missing != "" {
			fmt.Fprintf(stdout, "  %s\n", g.Missing)
		}
		for _, w := range g.Warnings {
			fmt.Fprintf(stdout, "  warning: %s\n", w)
		}
	}
	evs, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod.Name + ",involvedObject.kind=Pod",
	})
	if err == nil && len(evs.Items) > 0 {
		sort.Slice(evs.Items, func(i, j int) bool { return eventTime(evs.Items[i]).Time.Before(eventTime(evs.Items[j]).Time) })
		fmt.Fprintln(stdout, "Events")
		for _, e := range evs.Items {
			fmt.Fprintf(stdout, "  %s  %-16s %s\n", eventTime(e).Format("15:04:05"), e.Reason, e.Message)
		}
	}
	return nil
}

// explainClaims prints each of the pod's ResourceClaims: not created yet, not
// allocated yet, or the devices allocated (with the memory a share consumes) and how
// many consumers it is reserved for.
func explainClaims(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod, stdout io.Writer) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	fmt.Fprintln(stdout, "ResourceClaims")
	for _, pc := range pod.Spec.ResourceClaims {
		name := kube.ClaimName(pod, pc)
		if name == "" {
			fmt.Fprintf(stdout, "  %s: not created yet from template %s\n", pc.Name, ptrString(pc.ResourceClaimTemplateName))
			continue
		}
		claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			fmt.Fprintf(stdout, "  %s: claim %s: %v\n", pc.Name, name, err)
			continue
		}
		a := claim.Status.Allocation
		if a == nil {
			fmt.Fprintf(stdout, "  %s: claim %s, not allocated yet\n", pc.Name, name)
			continue
		}
		var devices []string
		for _, r := range a.Devices.Results {
			d := r.Driver + "/" + r.Pool + "/" + r.Device
			if q, ok := r.ConsumedCapacity["memory"]; ok && r.ShareID != nil {
				d += " (share of " + q.String() + ")"
			}
			devices = append(devices, d)
		}
		fmt.Fprintf(stdout, "  %s: claim %s, allocated %s; reserved for %d consumer(s)\n", pc.Name, name, strings.Join(devices, ", "), len(claim.Status.ReservedFor))
	}
}

func ptrString(s *string) string {
	if s == nil {
		return "?"
	}
	return *s
}

func eventTime(e corev1.Event) metav1.Time {
	if !e.LastTimestamp.IsZero() {
		return e.LastTimestamp
	}
	if !e.EventTime.IsZero() {
		return metav1.Time{Time: e.EventTime.Time}
	}
	return e.CreationTimestamp
}

func explainConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		st, err := sandbox.LoadState()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or $KUBECONFIG, and %w", err)
		}
		kubeconfig = st.Kubeconfig
	}
	return clientcmd.BuildConfigFromFlags("", kubeconfig)
}

// gangOf works out the pod's gang the way the scheduler does, from the pods of its
// namespace and their owners.
func gangOf(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, pod *corev1.Pod) (*gang.Gang, error) {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	lookup := &gang.StaticLookup{}
	load := func(gvr schema.GroupVersionResource, newObj func() any) {
		list, err := dyn.Resource(gvr).Namespace(pod.Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		for _, u := range list.Items {
			obj := newObj()
			if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj) == nil {
				_ = lookup.Add(obj)
			}
		}
	}
	load(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}, func() any { return &rayv1.RayCluster{} })
	load(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}, func() any { return &rayv1.RayJob{} })
	load(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayservices"}, func() any { return &rayv1.RayService{} })
	load(schema.GroupVersionResource{Group: "scheduling.gantry.dev", Version: "v1alpha1", Resource: "podgroups"}, func() any { return &schedulingv1alpha1.PodGroup{} })
	id := gang.Identify(pod, lookup)
	list, err := client.CoreV1().Pods(pod.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	var members []*corev1.Pod
	for i := range list.Items {
		if gang.Identify(&list.Items[i], lookup).Gang == id.Gang {
			members = append(members, &list.Items[i])
		}
	}
	for _, g := range gang.Group(members, lookup) {
		if g.ID == id.Gang {
			return g, nil
		}
	}
	return nil, nil
}
