package deploy

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// TestChartInstall installs the chart with the pinned helm on a real kube-apiserver
// (with kube-controller-manager, kwok playing the kubelets, and kube-scheduler placing
// the chart's own pods, as in a real cluster) and checks that the scheduler's replicas
// and the node agents start where they should, that the cluster-wide objects exist, and
// that the ServiceAccounts can do what the components need and no more.
func TestChartInstall(t *testing.T) {
	if env == nil {
		t.Skip("installs on a real control plane; not started with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	// Two GPU nodes as GPU Feature Discovery labels them, one of them tainted as GPU
	// nodes often are, and a node without GPUs.
	createNode(t, "gpu-0", map[string]string{"nvidia.com/gpu.present": "true"}, nil)
	createNode(t, "gpu-1", map[string]string{"nvidia.com/gpu.present": "true"},
		[]corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}})
	createNode(t, "cpu-0", nil, nil)
	// The GPU Operator creates the nvidia RuntimeClass; pods naming a missing one are
	// refused at admission.
	if _, err := env.Client.NodeV1().RuntimeClasses().Create(ctx, &nodev1.RuntimeClass{
		ObjectMeta: metav1.ObjectMeta{Name: "nvidia"}, Handler: "nvidia",
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	startKubeScheduler(t)

	out, err := helm(t, "install", "gantry", chartRel, "--namespace", releaseNamespace, "--create-namespace",
		"--kubeconfig", env.Kubeconfig, "--timeout", "2m")
	if err != nil {
		t.Fatal(err)
	}
	if notes := out[strings.Index(out, "NOTES:")+1:]; !strings.Contains(out, "NOTES:") || strings.Contains(notes, "<no value>") ||
		!strings.Contains(notes, "[gantry-scheduler]") || !strings.Contains(notes, "serveKaiSchedulerPods") {
		t.Errorf("helm install printed no usable NOTES:\n%s", out)
	}

	t.Run("scheduler replicas run", func(t *testing.T) {
		pods := waitForPods(ctx, t, "app.kubernetes.io/component=scheduler", func(pods []corev1.Pod) error {
			if n := running(pods); n != 2 {
				return fmt.Errorf("%d of 2 scheduler pods running", n)
			}
			return nil
		})
		for _, p := range pods {
			t.Logf("scheduler pod %s on %s", p.Name, p.Spec.NodeName)
			if p.Spec.NodeName == "gpu-1" {
				t.Errorf("scheduler pod %s landed on the tainted GPU node gpu-1", p.Name)
			}
		}
		if pods[0].Spec.NodeName == pods[1].Spec.NodeName {
			t.Errorf("both scheduler replicas on %s; they should spread over nodes", pods[0].Spec.NodeName)
		}
		waitFor(ctx, t, "scheduler Deployment available", func() error {
			d, err := env.Client.AppsV1().Deployments(releaseNamespace).Get(ctx, "gantry-scheduler", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if d.Status.AvailableReplicas != 2 {
				return fmt.Errorf("%d of 2 replicas available", d.Status.AvailableReplicas)
			}
			return nil
		})
	})

	t.Run("node agents run on the GPU nodes only", func(t *testing.T) {
		pods := waitForPods(ctx, t, "app.kubernetes.io/component=node-agent", func(pods []corev1.Pod) error {
			if n := running(pods); n != 2 {
				return fmt.Errorf("%d of 2 node agent pods running", n)
			}
			return nil
		})
		var nodes []string
		for _, p := range pods {
			nodes = append(nodes, p.Spec.NodeName)
		}
		sort.Strings(nodes)
		if !slices.Equal(nodes, []string{"gpu-0", "gpu-1"}) {
			t.Errorf("node agents on %v, want [gpu-0 gpu-1]", nodes)
		}
		waitFor(ctx, t, "DaemonSet ready", func() error {
			ds, err := env.Client.AppsV1().DaemonSets(releaseNamespace).Get(ctx, "gantry-node-agent", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if ds.Status.DesiredNumberScheduled != 2 || ds.Status.NumberReady != 2 {
				return fmt.Errorf("desired %d, ready %d; want 2 and 2", ds.Status.DesiredNumberScheduled, ds.Status.NumberReady)
			}
			return nil
		})
	})

	t.Run("cluster objects", func(t *testing.T) {
		dyn := dynamic.NewForConfigOrDie(env.Config)
		// The CRDs are the chart's templates, kept on uninstall; the default Queue is the
		// scheduler's to create (pkg/bootstrap), and kwok runs no scheduler.
		crd, err := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}).
			Get(ctx, "queues.scheduling.gantry.dev", metav1.GetOptions{})
		if err != nil {
			t.Errorf("Queue CRD: %v", err)
		} else if crd.GetAnnotations()["helm.sh/resource-policy"] != "keep" || crd.GetAnnotations()["meta.helm.sh/release-name"] != "gantry" {
			t.Errorf("Queue CRD annotations %v: want it part of the release and kept on uninstall", crd.GetAnnotations())
		}
		if _, err := dyn.Resource(gvr.Queue).
			List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list Queues: %v", err)
		}
		if _, err := env.Client.ResourceV1().DeviceClasses().Get(ctx, names.DriverName, metav1.GetOptions{}); err != nil {
			t.Errorf("DeviceClass: %v", err)
		}
		pcs, err := env.Client.SchedulingV1().PriorityClasses().List(ctx, metav1.ListOptions{LabelSelector: names.LabelPreemptible + "=true"})
		if err != nil || len(pcs.Items) != 1 || pcs.Items[0].Name != "gantry-train" {
			t.Errorf("preemptible PriorityClasses: %v %v, want gantry-train only", pcs, err)
		}
		cms, err := env.Client.CoreV1().ConfigMaps(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: "grafana_dashboard=1"})
		if err != nil || len(cms.Items) != 3 {
			t.Errorf("dashboard ConfigMaps: %d, %v; want 3", len(cms.Items), err)
		}
	})

	t.Run("service accounts can do what the components need and no more", func(t *testing.T) {
		for _, p := range permissions(false) {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User:   "system:serviceaccount:" + releaseNamespace + ":" + p.serviceAccount,
				Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + releaseNamespace, "system:authenticated"},
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: p.namespace, Verb: p.verb, Group: p.group, Resource: p.resource, Subresource: p.subresource, Name: p.name,
				},
			}}
			res, err := env.Client.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Status.Allowed != p.allowed {
				t.Errorf("%s: the API server says allowed = %v, want %v %s", p, res.Status.Allowed, p.allowed, res.Status.Reason)
			}
		}
	})

	t.Run("webhooks are registered", func(t *testing.T) {
		// The API server compiled the pod webhook's matchConditions when it accepted it.
		if _, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gantry-scheduler-pods", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
		if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "gantry-scheduler-queues", metav1.GetOptions{}); err != nil {
			t.Error(err)
		}
	})

	t.Run("examples pass the API server's validation", func(t *testing.T) {
		// kwok's pods run nothing, so no scheduler serves the Queue webhook here, and
		// with failurePolicy Fail every Queue would be refused: unregister it.
		err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Delete(ctx, "gantry-scheduler-queues", metav1.DeleteOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(discovery.NewDiscoveryClientForConfigOrDie(env.Config)))
		dyn := dynamic.NewForConfigOrDie(env.Config)
		for _, objs := range exampleObjects(t) {
			for _, o := range objs {
				u := &unstructured.Unstructured{}
				if err := u.UnmarshalJSON(mustJSON(t, o.raw)); err != nil {
					t.Fatalf("%s: %v", o.file, err)
				}
				gvk := u.GroupVersionKind()
				m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
				if err != nil {
					t.Errorf("%s: %s %s: %v", o.file, gvk, u.GetName(), err)
					continue
				}
				var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
				if m.Scope.Name() == meta.RESTScopeNameNamespace {
					ri = dyn.Resource(m.Resource).Namespace("default")
				}
				if _, err := ri.Create(ctx, u, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}); err != nil {
					t.Errorf("%s: %s %s: %v", o.file, gvk.Kind, u.GetName(), err)
				}
			}
		}
	})
}

func createNode(t *testing.T, name string, labels map[string]string, taints []corev1.Taint) {
	t.Helper()
	all := map[string]string{testenv.KwokNodeLabel: testenv.KwokNodeLabelValue, "kubernetes.io/hostname": name}
	for k, v := range labels {
		all[k] = v
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("16"),
		corev1.ResourceMemory: resource.MustParse("64Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: all, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := env.Client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node %s: %v", name, err)
	}
}

// startKubeScheduler runs the pinned kube-scheduler against the control plane until it
// stops: testenv runs none, and the chart's own pods use the default scheduler.
func startKubeScheduler(t *testing.T) {
	t.Helper()
	// Part of the control plane: its own process group, stopped with it.
	if _, err := env.StartProcess("kube-scheduler", tool(t, "kube-scheduler"), false,
		"--kubeconfig="+env.Kubeconfig,
		"--leader-elect=false",
		"--secure-port=0",
		"--kube-api-qps=100", "--kube-api-burst=200",
		"--v=1",
	); err != nil {
		t.Fatalf("start kube-scheduler: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			if b, err := os.ReadFile(filepath.Join(env.Dir, "kube-scheduler.log")); err == nil {
				t.Logf("kube-scheduler log (tail):\n%s", tailLines(string(b), 40))
			}
		}
	})
}

// waitForPods waits until check accepts the release's pods with the given selector and
// returns them; on timeout it fails with their state.
func waitForPods(ctx context.Context, t *testing.T, selector string, check func([]corev1.Pod) error) []corev1.Pod {
	t.Helper()
	var pods []corev1.Pod
	waitFor(ctx, t, "pods "+selector, func() error {
		list, err := env.Client.CoreV1().Pods(releaseNamespace).List(ctx, metav1.ListOptions{LabelSelector: selector})
		if err != nil {
			return err
		}
		pods = list.Items
		if err := check(pods); err != nil {
			return fmt.Errorf("%w:\n%s", err, describePods(pods))
		}
		return nil
	})
	return pods
}

func waitFor(ctx context.Context, t *testing.T, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			events, _ := env.Client.CoreV1().Events(releaseNamespace).List(context.Background(), metav1.ListOptions{})
			var lines []string
			for _, e := range events.Items {
				if e.Type != corev1.EventTypeNormal {
					lines = append(lines, fmt.Sprintf("  %s %s/%s: %s", e.Reason, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Message))
				}
			}
			t.Fatalf("%s: %v\nwarning events:\n%s", what, err, strings.Join(lines, "\n"))
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func running(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" && p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

func describePods(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		fmt.Fprintf(&b, "  %s node=%q phase=%s", p.Name, p.Spec.NodeName, p.Status.Phase)
		for _, c := range p.Status.Conditions {
			if c.Status != corev1.ConditionTrue && c.Message != "" {
				fmt.Fprintf(&b, " %s: %s", c.Type, c.Message)
			}
		}
		b.WriteByte('\n')
	}
	return b.String()
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

func mustJSON(t *testing.T, doc []byte) []byte {
	t.Helper()
	objs, err := decodeObjects(doc)
	if err != nil || len(objs) != 1 {
		t.Fatalf("decode %q: %v", doc, err)
	}
	b, err := objs[0].MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return b
}
