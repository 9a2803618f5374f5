package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
)

func init() {
	register(command{
		name:    "explain",
		summary: "why a pod is where it is, or why it waits: gantry explain POD [-n NAMESPACE]",
		cobra:   newExplainCmd,
	})
}

func newExplainCmd(kube *kubeFlags) *cobra.Command {
	var output, defaultQueue string
	cmd := &cobra.Command{
		Use:   "explain POD",
		Short: "Why a pod is where it is, or why it waits",
		Long: "Where the pod is bound (and its GPUs), or why it waits; its ResourceClaims, its gang\n" +
			"as the scheduler sees it, and its Events.",
		Example: "  gantry explain train-worker-0 -n ml\n  kubectl gantry explain train-worker-0 -o yaml",
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, ns, err := restConfig(kube)
			if err != nil {
				return err
			}
			e, err := explainPod(cmd.Context(), cfg, ns, args[0], defaultQueue)
			if err != nil {
				return err
			}
			if output != "" {
				return printData(cmd.OutOrStdout(), output, e)
			}
			e.printText(cmd.OutOrStdout())
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return podNames(cmd.Context(), kube), cobra.ShellCompDirectiveNoFileComp
		},
	}
	addOutputFlag(cmd, &output)
	cmd.Flags().StringVar(&defaultQueue, "default-queue", "default", "the scheduler's defaultQueue, which pods with no queue label are charged to")
	return cmd
}

// explanation is what `gantry explain` prints, as text or with -o json|yaml.
type explanation struct {
	Namespace       string         `json:"namespace"`
	Pod             string         `json:"pod"`
	SchedulerName   string         `json:"schedulerName"`
	Node            string         `json:"node,omitempty"`
	GPUs            string         `json:"gpus,omitempty"`
	Phase           string         `json:"phase"`
	NominatedNode   string         `json:"nominatedNode,omitempty"`
	WaitingBecause  string         `json:"waitingBecause,omitempty"`
	BeingEvicted    string         `json:"beingEvicted,omitempty"`
	SchedulingGates []string       `json:"schedulingGates,omitempty"`
	ChargedTo       queueCharge    `json:"chargedTo"`
	Claims          []claimState   `json:"resourceClaims,omitempty"`
	Gang            *gangState     `json:"gang,omitempty"`
	Events          []eventSummary `json:"events,omitempty"`
	// WorkloadMix is the mix the scheduler scores placements against, learned from
	// the pods it has seen; MixUnavailable says why it could not be read.
	WorkloadMix    []mixShare `json:"workloadMix,omitempty"`
	MixUnavailable string     `json:"workloadMixUnavailable,omitempty"`
}

type claimState struct {
	Name        string   `json:"name"`
	Claim       string   `json:"claim,omitempty"`
	Template    string   `json:"template,omitempty"`
	Allocated   []string `json:"allocated,omitempty"`
	ReservedFor int      `json:"reservedFor,omitempty"`
	Error       string   `json:"error,omitempty"`
}

type gangState struct {
	ID                string   `json:"id"`
	Source            string   `json:"source"`
	MinMember         int      `json:"minMember"`
	Queue             string   `json:"queue"`
	PriorityClassName string   `json:"priorityClassName"`
	Pending           int      `json:"pending"`
	Running           int      `json:"running"`
	Succeeded         int      `json:"succeeded"`
	Terminating       int      `json:"terminating"`
	Missing           string   `json:"missing,omitempty"`
	Warnings          []string `json:"warnings,omitempty"`
}

type eventSummary struct {
	Time    metav1.Time `json:"time"`
	Reason  string      `json:"reason"`
	Message string      `json:"message"`
}

func explainPod(ctx context.Context, cfg *rest.Config, ns, name, defaultQueue string) (*explanation, error) {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	pod, err := client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	e := &explanation{
		Namespace: pod.Namespace, Pod: pod.Name, SchedulerName: pod.Spec.SchedulerName,
		Node: pod.Spec.NodeName, GPUs: pod.Annotations[names.AnnotationGPUs], Phase: string(pod.Status.Phase),
		NominatedNode: pod.Status.NominatedNodeName,
	}
	for _, c := range pod.Status.Conditions {
		switch {
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			e.WaitingBecause = c.Message
		case c.Type == corev1.DisruptionTarget && c.Status == corev1.ConditionTrue:
			e.BeingEvicted = c.Message
		}
	}
	for _, g := range pod.Spec.SchedulingGates {
		e.SchedulingGates = append(e.SchedulingGates, g.Name)
	}
	e.Claims = explainClaims(ctx, client, pod)
	g, err := gangOf(ctx, cfg, client, pod)
	if err != nil {
		g = nil
	}
	e.ChargedTo = chargedQueue(pod, g, defaultQueue, listQueues(ctx, cfg))
	if g != nil {
		e.Gang = &gangState{
			ID: string(g.ID), Source: string(g.Source), MinMember: g.MinMember, Queue: g.Queue, PriorityClassName: g.PriorityClassName,
			Pending: g.Counts.Pending, Running: g.Counts.Running, Succeeded: g.Counts.Succeeded, Terminating: g.Counts.Terminating,
			Missing: g.Missing, Warnings: g.Warnings,
		}
	}
	evs, err := client.CoreV1().Events(pod.Namespace).List(ctx, metav1.ListOptions{
		FieldSelector: "involvedObject.name=" + pod.Name + ",involvedObject.kind=Pod",
	})
	if err == nil {
		sort.Slice(evs.Items, func(i, j int) bool { return eventTime(evs.Items[i]).Time.Before(eventTime(evs.Items[j]).Time) })
		for _, ev := range evs.Items {
			e.Events = append(e.Events, eventSummary{Time: eventTime(ev), Reason: ev.Reason, Message: ev.Message})
		}
	}
	if e.WorkloadMix, err = workloadMix(ctx, client); err != nil {
		e.MixUnavailable = err.Error()
	}
	return e, nil
}

func (e *explanation) printText(w io.Writer) {
	fmt.Fprintf(w, "Pod %s/%s (schedulerName %s)\n", e.Namespace, e.Pod, e.SchedulerName)
	switch {
	case e.Node != "":
		fmt.Fprintf(w, "  bound to %s", e.Node)
		if e.GPUs != "" {
			fmt.Fprintf(w, ", GPUs %s (index[:bytes of a share])", e.GPUs)
		}
		fmt.Fprintf(w, "; phase %s\n", e.Phase)
	case e.NominatedNode != "":
		fmt.Fprintf(w, "  pending; nominated to %s while preempted pods leave\n", e.NominatedNode)
	default:
		fmt.Fprintln(w, "  pending")
	}
	if e.ChargedTo.Queue != "" {
		fmt.Fprintf(w, "  charged to queue %s: %s\n", e.ChargedTo.Queue, e.ChargedTo.Why)
	} else {
		fmt.Fprintf(w, "  charged to no queue: %s\n", e.ChargedTo.Why)
	}
	if e.WaitingBecause != "" {
		fmt.Fprintf(w, "  why it waits: %s\n", e.WaitingBecause)
	}
	if e.BeingEvicted != "" {
		fmt.Fprintf(w, "  being evicted: %s\n", e.BeingEvicted)
	}
	if len(e.SchedulingGates) > 0 {
		fmt.Fprintf(w, "  held by scheduling gates: %s\n", strings.Join(e.SchedulingGates, ", "))
	}
	if len(e.Claims) > 0 {
		fmt.Fprintln(w, "ResourceClaims")
	}
	for _, c := range e.Claims {
		switch {
		case c.Claim == "":
			fmt.Fprintf(w, "  %s: not created yet from template %s\n", c.Name, c.Template)
		case c.Error != "":
			fmt.Fprintf(w, "  %s: claim %s: %s\n", c.Name, c.Claim, c.Error)
		case len(c.Allocated) == 0:
			fmt.Fprintf(w, "  %s: claim %s, not allocated yet\n", c.Name, c.Claim)
		default:
			fmt.Fprintf(w, "  %s: claim %s, allocated %s; reserved for %d consumer(s)\n", c.Name, c.Claim, strings.Join(c.Allocated, ", "), c.ReservedFor)
		}
	}
	if g := e.Gang; g != nil {
		fmt.Fprintf(w, "Gang %s (%s)\n", g.ID, g.Source)
		fmt.Fprintf(w, "  must start together: %d; queue %q; priority class %q\n", g.MinMember, g.Queue, g.PriorityClassName)
		fmt.Fprintf(w, "  members: %d pending, %d running, %d succeeded, %d terminating\n", g.Pending, g.Running, g.Succeeded, g.Terminating)
		if g.Missing != "" {
			fmt.Fprintf(w, "  %s\n", g.Missing)
		}
		for _, warn := range g.Warnings {
			fmt.Fprintf(w, "  warning: %s\n", warn)
		}
	}
	if len(e.Events) > 0 {
		fmt.Fprintln(w, "Events")
		for _, ev := range e.Events {
			fmt.Fprintf(w, "  %s  %-16s %s\n", ev.Time.Format("15:04:05"), ev.Reason, ev.Message)
		}
	}
	e.printMix(w)
}

// explainClaims describes each of the pod's ResourceClaims: not created yet, not
// allocated yet, or the devices allocated (with the memory a share consumes) and how
// many consumers it is reserved for.
func explainClaims(ctx context.Context, client kubernetes.Interface, pod *corev1.Pod) []claimState {
	var out []claimState
	for _, pc := range pod.Spec.ResourceClaims {
		st := claimState{Name: pc.Name, Claim: dra.ClaimName(pod, pc)}
		if st.Claim == "" {
			st.Template = ptrString(pc.ResourceClaimTemplateName)
			out = append(out, st)
			continue
		}
		claim, err := client.ResourceV1().ResourceClaims(pod.Namespace).Get(ctx, st.Claim, metav1.GetOptions{})
		if err != nil {
			st.Error = err.Error()
			out = append(out, st)
			continue
		}
		if a := claim.Status.Allocation; a != nil {
			for _, r := range a.Devices.Results {
				d := r.Driver + "/" + r.Pool + "/" + r.Device
				if q, ok := r.ConsumedCapacity["memory"]; ok && r.ShareID != nil {
					d += " (share of " + q.String() + ")"
				}
				st.Allocated = append(st.Allocated, d)
			}
			st.ReservedFor = len(claim.Status.ReservedFor)
		}
		out = append(out, st)
	}
	return out
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
	load(gvr.RayCluster, func() any { return &rayv1.RayCluster{} })
	load(schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}, func() any { return &rayv1.RayJob{} })
	load(gvr.RayService, func() any { return &rayv1.RayService{} })
	load(gvr.PodGroup, func() any { return &schedulingv1alpha1.PodGroup{} })
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
