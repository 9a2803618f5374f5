package deploy

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

// The API server calls a webhook's Service at one of its endpoints (the control
// plane runs with --enable-aggregator-routing): kwok's pods run nothing, so the
// test serves the scheduler's webhooks itself (pkg/webhook, with the certificate
// pkg/certs wrote) on this host's address, and points the chart's Service at it.

// hostIP is an address of this host that the API server can dial and that
// Endpoints accept (not loopback, not link-local).
func hostIP(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && n.IP.IsGlobalUnicast() {
			return n.IP.String()
		}
	}
	t.Fatalf("no global IPv4 address on this host (have %v): the API server needs one to reach the test's webhook server", addrs)
	return ""
}

// serveWebhooks serves the chart's webhooks from certDir on this host until ctx
// ends and points Service ns/svc at them with a hand-made EndpointSlice.
func serveWebhooks(ctx context.Context, t *testing.T, ns, svc, certDir string) {
	t.Helper()
	ip := hostIP(t)
	ln, err := net.Listen("tcp", ip+":0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	if err := webhook.Serve(ctx, net.JoinHostPort(ip, strconv.Itoa(port)), certDir, dynamic.NewForConfigOrDie(env.Config)); err != nil {
		t.Fatal(err)
	}
	// The pinned API server resolves a webhook's Service from its EndpointSlices only
	// (k8s.io/apiserver/pkg/util/proxy.ResolveEndpoint), skipping slices without
	// endpoints: the endpointslice controller's own slice of a Service whose selector
	// matches no running pod leaves this one the only choice.
	if _, err := env.Client.DiscoveryV1().EndpointSlices(ns).Create(ctx, &discoveryv1.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: svc + "-test", Labels: map[string]string{discoveryv1.LabelServiceName: svc}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{ip}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       []discoveryv1.EndpointPort{{Name: ptr.To("webhook"), Port: ptr.To(int32(port)), Protocol: ptr.To(corev1.ProtocolTCP)}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// withoutSelector is the chart's webhook Service with no pod selector, so that the
// endpoints controller leaves the test's endpoints alone.
func withoutSelector(o *unstructured.Unstructured) *unstructured.Unstructured {
	c := o.DeepCopy()
	unstructured.RemoveNestedField(c.Object, "spec", "selector")
	return c
}

// webhooksAnswer asks the API server to admit (dry run) a Queue under a parent that
// does not exist, which only the Queue webhook refuses, and a pod that requests
// nvidia.com/gpu without a limit, which the API server's validation refuses unless
// the pod webhook (failurePolicy Ignore) has added the limit. Both answers show the
// API server called the webhooks over TLS with the caBundle it holds.
func webhooksAnswer(ctx context.Context) error {
	dyn := dynamic.NewForConfigOrDie(env.Config)
	q := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.Queue.GroupVersion().String(), "kind": "Queue",
		"metadata": map[string]any{"name": "webhook-probe"},
		"spec":     map[string]any{"parentQueue": "no-such-parent"},
	}}
	_, err := dyn.Resource(gvr.Queue).Create(ctx, q, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err == nil {
		return fmt.Errorf("a Queue under a missing parent was admitted: the Queue webhook was not called")
	}
	if !strings.Contains(err.Error(), "no-such-parent") || strings.Contains(err.Error(), "failed calling webhook") {
		return fmt.Errorf("Queue webhook: %v", err)
	}
	gpu := corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "webhook-probe"},
		Spec: corev1.PodSpec{
			AutomountServiceAccountToken: ptr.To(false),
			Containers:                   []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{Requests: gpu}}},
		},
	}
	got, err := env.Client.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil {
		return fmt.Errorf("pod webhook did not add the missing limit: %v", err)
	}
	if l := got.Spec.Containers[0].Resources.Limits["nvidia.com/gpu"]; l.Value() != 1 {
		return fmt.Errorf("pod webhook: limits %v, want nvidia.com/gpu: 1", got.Spec.Containers[0].Resources.Limits)
	}
	return nil
}
