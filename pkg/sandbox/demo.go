package sandbox

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/pkg/controlplane"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
)

// The seed's object names.
const (
	trainingCluster = "raycluster-sample"
	inferenceName   = "ray-kai-scheduler-serve-llm"
)

// gangBindSpread is how long one gang decision's Bindings may take to all land: one
// round trip each, in parallel, on a loaded machine.
const gangBindSpread = 3 * time.Second

// DemoOptions shape the demo.
type DemoOptions struct {
	// SeedDir holds raycluster-train.yaml and rayservice-inference.yaml.
	SeedDir   string
	Namespace string
	Out       io.Writer
	// Timeout bounds each step.
	Timeout time.Duration
}

// Outcome is what the demo saw, for tests and the summary.
type Outcome struct {
	// TrainingBoundTogether: the training head and worker were bound in one decision:
	// neither before both existed, and the second within gangBindSpread of the first.
	TrainingBoundTogether bool
	InferenceBound        bool
	// TrainingEvicted counts training pods preempted for the inference service.
	TrainingEvicted int
	// PreemptionEvents are the Preempted events' messages.
	PreemptionEvents []string
	// TrainingBack: after the RayService is deleted, the training cluster is bound
	// again, whole.
	TrainingBack bool
}

// Demo plays the seed scenario on a running cluster and prints a timeline.
func Demo(ctx context.Context, cfg *rest.Config, o DemoOptions) (*Outcome, error) {
	if o.Namespace == "" {
		o.Namespace = "default"
	}
	if o.Timeout == 0 {
		o.Timeout = 2 * time.Minute
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	d := &demo{ctx: ctx, cfg: cfg, client: client, o: o, start: time.Now(), seen: map[string]string{}, events: map[string]bool{}}
	out := &Outcome{}

	d.say("1. The training RayCluster (queue team-a, priority class train) arrives: head + 1 GPU worker, a gang.")
	if err := d.apply("raycluster-train.yaml"); err != nil {
		return out, err
	}
	// The binder posts a gang's Bindings in parallel, so a List can land between
	// two of them. Apart means what a broken gang does: a member bound before the
	// other existed, or one bound and the other still not seconds later.
	apart := false
	var partialSince time.Time
	if err := d.until("the training gang is bound", func(ps []corev1.Pod) bool {
		tr := pods(ps, trainingCluster)
		n := boundCount(tr)
		switch {
		case n > 0 && len(tr) < 2:
			apart = true
		case n == 1 && partialSince.IsZero():
			partialSince = time.Now()
		case n == 1 && time.Since(partialSince) > gangBindSpread:
			apart = true
		}
		return len(tr) == 2 && n == 2
	}); err != nil {
		return out, err
	}
	out.TrainingBoundTogether = !apart
	d.say("   Both training pods were bound together, as one gang.")

	d.say("2. The vLLM RayService (priority class inference, gpu_memory_utilization 0.75) arrives and needs the only GPU.")
	if err := d.apply("rayservice-inference.yaml"); err != nil {
		return out, err
	}
	if err := d.until("the inference service is bound and training preempted", func(ps []corev1.Pod) bool {
		inf := pods(ps, inferenceName)
		return len(inf) == 2 && boundCount(inf) == 2 && boundCount(pods(ps, trainingCluster)) == 0
	}); err != nil {
		return out, err
	}
	out.InferenceBound = true
	for _, msg := range d.preemptions {
		out.PreemptionEvents = append(out.PreemptionEvents, msg)
		out.TrainingEvicted++
	}
	d.say("   kubectl get pods -o wide:")
	d.table()

	d.say("3. The RayService is deleted: the training cluster comes back, whole.")
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return out, err
	}
	rs := gvr.RayService
	if err := dyn.Resource(rs).Namespace(o.Namespace).Delete(ctx, inferenceName, metav1.DeleteOptions{}); err != nil {
		return out, fmt.Errorf("delete RayService: %w", err)
	}
	if err := d.until("the training gang is bound again", func(ps []corev1.Pod) bool {
		return boundCount(pods(ps, trainingCluster)) == 2 && len(pods(ps, inferenceName)) == 0
	}); err != nil {
		return out, err
	}
	out.TrainingBack = true
	d.table()
	return out, nil
}

type demo struct {
	ctx         context.Context
	cfg         *rest.Config
	client      kubernetes.Interface
	o           DemoOptions
	start       time.Time
	seen        map[string]string
	events      map[string]bool
	preemptions []string
	last        []corev1.Pod
}

func (d *demo) say(format string, args ...any) {
	fmt.Fprintf(d.o.Out, format+"\n", args...)
}

func (d *demo) event(format string, args ...any) {
	fmt.Fprintf(d.o.Out, "   [%5.1fs] %s\n", time.Since(d.start).Seconds(), fmt.Sprintf(format, args...))
}

func (d *demo) apply(file string) error {
	_, err := controlplane.ApplyFile(d.ctx, d.cfg, d.o.Namespace, filepath.Join(d.o.SeedDir, file))
	if err != nil {
		return fmt.Errorf("apply %s: %w", file, err)
	}
	d.event("applied %s", file)
	return nil
}

// until polls pods and events, printing every change, until done holds.
func (d *demo) until(what string, done func([]corev1.Pod) bool) error {
	ctx, cancel := context.WithTimeout(d.ctx, d.o.Timeout)
	defer cancel()
	for {
		list, err := d.client.CoreV1().Pods(d.o.Namespace).List(ctx, metav1.ListOptions{})
		if err == nil {
			d.report(list.Items)
			d.last = list.Items
			if done(list.Items) {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: not within %s; pods now:\n%s", what, d.o.Timeout, describe(d.last))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// report prints pods that appeared, were bound, were marked for preemption or left.
func (d *demo) report(ps []corev1.Pod) {
	now := map[string]bool{}
	for _, p := range ps {
		now[p.Name] = true
		state := "pending"
		switch {
		case p.DeletionTimestamp != nil:
			state = "terminating"
		case p.Spec.NodeName != "":
			state = "bound"
		}
		prev, known := d.seen[p.Name]
		if known && prev == state {
			continue
		}
		d.seen[p.Name] = state
		switch state {
		case "pending":
			d.event("%s created (schedulerName %s)", p.Name, p.Spec.SchedulerName)
			if msg := waitingReason(p); msg != "" {
				d.event("%s waits: %s", p.Name, msg)
			}
		case "bound":
			gpus := p.Annotations[names.AnnotationGPUs]
			if gpus != "" {
				gpus = ", GPU " + gpus
			}
			d.event("%s bound to %s%s", p.Name, p.Spec.NodeName, gpus)
		case "terminating":
			d.event("%s terminating", p.Name)
		}
	}
	for name := range d.seen {
		if !now[name] {
			d.event("%s gone", name)
			delete(d.seen, name)
		}
	}
	evs, err := d.client.CoreV1().Events(d.o.Namespace).List(d.ctx, metav1.ListOptions{FieldSelector: "reason=Preempted"})
	if err != nil {
		return
	}
	for _, e := range evs.Items {
		if d.events[string(e.UID)] {
			continue
		}
		d.events[string(e.UID)] = true
		d.preemptions = append(d.preemptions, e.Message)
		d.event("Gantry preempts %s: %s", e.InvolvedObject.Name, e.Message)
	}
}

func waitingReason(p corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Message
		}
	}
	return ""
}

func (d *demo) table() {
	tw := tabwriter.NewWriter(d.o.Out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "   NAME\tSTATUS\tNODE\tGPU")
	ps := append([]corev1.Pod(nil), d.last...)
	sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	for _, p := range ps {
		status := string(p.Status.Phase)
		if p.DeletionTimestamp != nil {
			status = "Terminating"
		}
		node := p.Spec.NodeName
		if node == "" {
			node = "<none>"
		}
		fmt.Fprintf(tw, "   %s\t%s\t%s\t%s\n", p.Name, status, node, p.Annotations[names.AnnotationGPUs])
	}
	tw.Flush()
}

func pods(ps []corev1.Pod, cluster string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range ps {
		if strings.HasPrefix(p.Labels["ray.io/cluster"], cluster) && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func boundCount(ps []corev1.Pod) int {
	n := 0
	for _, p := range ps {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

func describe(ps []corev1.Pod) string {
	var b strings.Builder
	for _, p := range ps {
		fmt.Fprintf(&b, "  %s node=%q %s\n", p.Name, p.Spec.NodeName, waitingReason(p))
	}
	return b.String()
}
