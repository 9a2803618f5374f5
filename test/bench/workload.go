package bench

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// Names the workload uses.
const (
	// Namespace holds every benchmark pod.
	Namespace = "bench"
	// GPUResource is the extended resource of the non-DRA scenarios.
	GPUResource corev1.ResourceName = "nvidia.com/gpu"
	// DRADriver is Gantry's DRA driver; the DeviceClass has the same name.
	DRADriver = names.DriverName
	// ClaimTemplate is the ResourceClaimTemplate DRA pods claim one GPU through.
	ClaimTemplate = "one-gpu"

	AnnotationPodGroup  = names.AnnotationPodGroup
	AnnotationMinMember = names.AnnotationMinMember

	// notReadyTaint is what the TaintNodesByCondition admission plugin puts on every
	// new Node; without kube-controller-manager nothing lifts it.
	notReadyTaint = "node.kubernetes.io/not-ready"
)

// parallel runs f(0..n-1) on workers goroutines and returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := 0; w < min(workers, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || ctx.Err() != nil {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	return context.Cause(ctx)
}

func nodeName(i int) string { return fmt.Sprintf("gpu-node-%05d", i) }

// node is a GPU node as a kubelet would register it: allocatable set, no taints once
// the admission plugin's not-ready taint is removed. DRA nodes advertise no extended
// resource: their GPUs are in ResourceSlices.
func node(i int, s Scenario) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("96"),
		corev1.ResourceMemory: resource.MustParse("1024Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if !s.DRA {
		alloc[GPUResource] = *resource.NewQuantity(int64(s.GPUsPerNode), resource.DecimalSI)
	}
	name := nodeName(i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
		}},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
	}
}

// createNodes creates the scenario's nodes and removes the not-ready taint the API
// server adds on creation, as the node-lifecycle controller would for a Ready node.
func createNodes(ctx context.Context, client kubernetes.Interface, s Scenario, workers int) error {
	untaint := []byte(`{"spec":{"taints":null}}`)
	return parallel(ctx, s.Nodes, workers, func(ctx context.Context, i int) error {
		var n *corev1.Node
		tries := 0
		err := create(ctx, fmt.Sprintf("node %d", i), func(ctx context.Context) error {
			var err error
			tries++
			n, err = client.CoreV1().Nodes().Create(ctx, node(i, s), metav1.CreateOptions{})
			if tries > 1 && apierrors.IsAlreadyExists(err) { // created by an earlier try: read it back
				n, err = client.CoreV1().Nodes().Get(ctx, nodeName(i), metav1.GetOptions{})
			}
			return err
		})
		if err != nil {
			return err
		}
		if len(n.Spec.Taints) == 0 {
			return nil
		}
		if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, untaint, metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("remove taints of node %s: %w", n.Name, err)
		}
		return nil
	})
}

// checkNodesUntainted fails if any node carries a taint, which would make the pods
// unschedulable (or, for DRA, untolerated).
func checkNodesUntainted(ctx context.Context, client kubernetes.Interface, want int) error {
	// A consistent read: the watch cache (ResourceVersion "0") may not show the last
	// patches yet.
	list, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list nodes: %w", err)
	}
	if len(list.Items) != want {
		return fmt.Errorf("%d nodes exist, want %d", len(list.Items), want)
	}
	for _, n := range list.Items {
		if len(n.Spec.Taints) > 0 {
			return fmt.Errorf("node %s carries taints %v", n.Name, n.Spec.Taints)
		}
	}
	return nil
}

// pod is the i-th pending pod of the scenario for the given scheduler.
func pod(i int, s Scenario, sched Scheduler) *corev1.Pod {
	requests := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("100m"),
		corev1.ResourceMemory: resource.MustParse("128Mi"),
	}
	limits := corev1.ResourceList{}
	if !s.DRA {
		requests[GPUResource] = resource.MustParse("1")
		limits[GPUResource] = resource.MustParse("1")
	}
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("pod-%05d", i), Namespace: Namespace},
		Spec: corev1.PodSpec{
			SchedulerName: string(sched),
			Containers: []corev1.Container{{
				Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources: corev1.ResourceRequirements{Requests: requests, Limits: limits},
			}},
			TerminationGracePeriodSeconds: ptr.To[int64](0),
		},
	}
	if g, size := s.gangOf(i); size > 0 {
		p.Annotations = map[string]string{
			AnnotationPodGroup:  gangName(g),
			AnnotationMinMember: strconv.Itoa(size),
		}
	}
	if s.DRA {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimTemplateName: ptr.To(ClaimTemplate)}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		// kube-controller-manager runs in the DRA scenario, and its node-lifecycle
		// controller taints nodes that no kubelet reports for: tolerate everything.
		p.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
	}
	return p
}

func gangName(g int) string { return fmt.Sprintf("g-%d", g) }

// createPods creates the whole backlog for sched.
func createPods(ctx context.Context, client kubernetes.Interface, s Scenario, sched Scheduler, workers int) error {
	return parallel(ctx, s.Pods, workers, func(ctx context.Context, i int) error {
		return create(ctx, fmt.Sprintf("pod %d", i), func(ctx context.Context) error {
			_, err := client.CoreV1().Pods(Namespace).Create(ctx, pod(i, s, sched), metav1.CreateOptions{})
			return err
		})
	})
}

// createDRAObjects creates the DeviceClass, the claim template and one ResourceSlice
// per node, shaped as Gantry's node agent publishes them (pool named after the node,
// devices gpu-0..N with index, uuid, productName and memory capacity).
func createDRAObjects(ctx context.Context, client kubernetes.Interface, s Scenario, workers int) error {
	dc := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: DRADriver},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "` + DRADriver + `"`},
		}}},
	}
	if _, err := client.ResourceV1().DeviceClasses().Create(ctx, dc, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create DeviceClass: %w", err)
	}
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: ClaimTemplate, Namespace: Namespace},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{
			Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
				Name: "gpu",
				Exactly: &resourceapi.ExactDeviceRequest{
					DeviceClassName: DRADriver, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
				},
			}}},
		}},
	}
	if s.Selector != "" {
		req := tmpl.Spec.Spec.Devices.Requests[0].Exactly
		req.Selectors = []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: s.Selector}}}
	}
	if _, err := client.ResourceV1().ResourceClaimTemplates(Namespace).Create(ctx, tmpl, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create ResourceClaimTemplate: %w", err)
	}
	return parallel(ctx, s.Nodes, workers, func(ctx context.Context, i int) error {
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, resourceSlice(i, s.GPUsPerNode, nodeName(i)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceSlice of node %d: %w", i, err)
		}
		return nil
	})
}

// resourceSlice is node i's GPUs as the node agent publishes them: gpus H100s named
// after node, the i-th node of its benchmark.
func resourceSlice(i, gpus int, node string) *resourceapi.ResourceSlice {
	devices := make([]resourceapi.Device, gpus)
	for g := range devices {
		devices[g] = resourceapi.Device{
			Name: fmt.Sprintf("gpu-%d", g),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":       {IntValue: ptr.To(int64(g))},
				"uuid":        {StringValue: ptr.To(fmt.Sprintf("GPU-%08x-0000-0000-0000-%012x", i, g))},
				"productName": {StringValue: ptr.To("NVIDIA H100 80GB HBM3")},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: h100Memory}},
		}
	}
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-" + DRADriver},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   DRADriver,
			Pool:     resourceapi.ResourcePool{Name: node, Generation: 1, ResourceSliceCount: 1},
			NodeName: ptr.To(node),
			Devices:  devices,
		},
	}
}

// waitClaimsCreated waits until kube-controller-manager has created every pod's
// ResourceClaim from the template (pod.status.resourceClaimStatuses names it), so
// that the scheduler starts on a complete backlog.
func waitClaimsCreated(ctx context.Context, client kubernetes.Interface, want int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		claims, err := client.ResourceV1().ResourceClaims(Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("list ResourceClaims: %w", err)
		}
		pods, err := client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
		if err != nil {
			return fmt.Errorf("list pods: %w", err)
		}
		withStatus := 0
		for _, p := range pods.Items {
			if len(p.Status.ResourceClaimStatuses) > 0 && p.Status.ResourceClaimStatuses[0].ResourceClaimName != nil {
				withStatus++
			}
		}
		if len(claims.Items) >= want && withStatus >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %s, %d of %d ResourceClaims exist and %d pods name theirs", timeout, len(claims.Items), want, withStatus)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// placementCheck is what validatePlacement found.
type placementCheck struct {
	// ClaimsAllocated and ClaimsReserved count DRA claims with an allocation and with
	// a consumer.
	ClaimsAllocated, ClaimsReserved int
	// Violations says what is wrong, one kind a line with a count and an example.
	Violations []string
}

// validatePlacement checks that no node got more one-GPU pods than it has GPUs and,
// for DRA, that no device is allocated twice and each claim's device is on its pod's
// node: a fast scheduler that overcommits has not scheduled.
func validatePlacement(ctx context.Context, client kubernetes.Interface, s Scenario) (placementCheck, error) {
	var out placementCheck
	pods, err := client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list pods: %w", err)
	}
	violations := map[string][]string{}
	var kinds []string
	violate := func(kind, example string) {
		if violations[kind] == nil {
			kinds = append(kinds, kind)
		}
		violations[kind] = append(violations[kind], example)
	}
	defer func() {
		for _, k := range kinds {
			out.Violations = append(out.Violations, fmt.Sprintf("%d× %s (e.g. %s)", len(violations[k]), k, violations[k][0]))
		}
	}()
	perNode := map[string]int{}
	nodeOf := map[string]string{}
	for _, p := range pods.Items {
		if p.Spec.NodeName != "" {
			perNode[p.Spec.NodeName]++
			nodeOf[p.Name] = p.Spec.NodeName
		}
	}
	for n, c := range perNode {
		if c > s.GPUsPerNode {
			violate("node with more one-GPU pods than GPUs", fmt.Sprintf("%s has %d", n, c))
		}
	}
	if !s.DRA {
		return out, nil
	}
	claims, err := client.ResourceV1().ResourceClaims(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return out, fmt.Errorf("list ResourceClaims: %w", err)
	}
	holder := map[string]string{}
	for _, c := range claims.Items {
		if len(c.Status.ReservedFor) > 0 {
			out.ClaimsReserved++
		}
		if c.Status.Allocation == nil {
			continue
		}
		out.ClaimsAllocated++
		for _, d := range c.Status.Allocation.Devices.Results {
			dev := d.Pool + "/" + d.Device
			if other, dup := holder[dev]; dup {
				violate("device allocated to two claims", fmt.Sprintf("%s to %s and %s", dev, other, c.Name))
			}
			holder[dev] = c.Name
			for _, ref := range c.Status.ReservedFor {
				if node := nodeOf[ref.Name]; ref.Resource == "pods" && node != "" && node != d.Pool {
					violate("claim whose device is not on its pod's node", fmt.Sprintf("%s has %s, pod %s is on %s", c.Name, dev, ref.Name, node))
				}
			}
		}
	}
	return out, nil
}

// warmCRDWatchCaches lists and watches every installed CRD once, as its controllers
// would have on a cluster that has been up for a while. On a fresh API server the
// first watch of a custom resource is answered "429, retry after 1s" while its watch
// cache starts; without this, gantry-scheduler (which watches its CRDs) would pay that
// second at every benchmark start and kube-scheduler (which watches none) would not.
func warmCRDWatchCaches(ctx context.Context, cfg *rest.Config) error {
	ext, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	crds, err := ext.ApiextensionsV1().CustomResourceDefinitions().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list CRDs: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	var synced []cache.InformerSynced
	for _, crd := range crds.Items {
		for _, v := range crd.Spec.Versions {
			if v.Served {
				gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
				synced = append(synced, factory.ForResource(gvr).Informer().HasSynced)
			}
		}
	}
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), synced...) {
		return fmt.Errorf("watch caches of %d custom resources not ready after 30s", len(synced))
	}
	cancel()
	return nil
}
