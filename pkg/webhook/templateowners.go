package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/names"
)

// The templates the pod webhook creates for annotation shares are shared: one per
// namespace and shape, reused by every pod of that shape. They are collected the
// Kubernetes way: TemplateOwners records every pod that uses one (the pods the
// webhook labelled names.LabelGPUShareClaim) among its ownerReferences, and the
// garbage collector of kube-controller-manager deletes the template once all of them
// are gone, pruning the references of deleted pods meanwhile. The webhook cannot
// record the owner itself: at admission the pod has no UID yet.
//
// Only a pod whose claim is not yet generated needs the template (kube-controller-
// manager copies it into the pod's own ResourceClaim, which the pod then owns). The
// one race, a pod admitted against a template the collector deletes before the claim
// is generated, is closed here: such a pod gets its template created again, with the
// pod as owner, and kube-controller-manager, which watches templates, then generates
// the claim.

var (
	podsGVR      = schema.GroupVersionResource{Version: "v1", Resource: "pods"}
	templatesGVR = schema.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: "resourceclaimtemplates"}
)

// TemplateFor is the template a pod's share annotation asks for now (as the webhook
// would make it), or nil when it cannot be made (no node publishes a Gantry GPU).
type TemplateFor func(ctx context.Context, pod *corev1.Pod) (*resourceapi.ResourceClaimTemplate, error)

// TemplateFor makes p's share templates for pods already admitted.
func (p PodDefaulter) TemplateFor(ctx context.Context, pod *corev1.Pod) (*resourceapi.ResourceClaimTemplate, error) {
	tmpl, warning, refusal := p.shareTemplate(ctx, withoutShareClaim(pod))
	if tmpl == nil {
		return nil, fmt.Errorf("no template for pod %s/%s: %s%s", pod.Namespace, pod.Name, warning, refusal)
	}
	return tmpl, nil
}

// withoutShareClaim is pod without its ShareClaimRef entry, as the webhook saw it.
func withoutShareClaim(pod *corev1.Pod) *corev1.Pod {
	out := pod.DeepCopy()
	out.Spec.ResourceClaims = nil
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name != ShareClaimRef {
			out.Spec.ResourceClaims = append(out.Spec.ResourceClaims, pc)
		}
	}
	return out
}

// RunTemplateOwners keeps the ownerReferences of annotation-share templates until ctx
// ends (see above). It needs list and watch on pods, and get, create and patch on
// resourceclaimtemplates. Every scheduler replica may run it: its writes are
// idempotent.
func RunTemplateOwners(ctx context.Context, dyn dynamic.Interface, templateFor TemplateFor) {
	factory := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 10*time.Minute, metav1.NamespaceAll,
		func(o *metav1.ListOptions) { o.LabelSelector = names.LabelGPUShareClaim + "=true" })
	inf := factory.ForResource(podsGVR).Informer()
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	o := &templateOwners{dyn: dyn, templateFor: templateFor, store: inf.GetStore(), done: map[types.UID]bool{}}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			q.Add(key)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: enqueue, UpdateFunc: func(_, obj any) { enqueue(obj) }, DeleteFunc: o.forget,
	}); err != nil {
		klog.ErrorS(err, "Share templates: no pod handler")
		return
	}
	factory.Start(ctx.Done())
	go func() {
		<-ctx.Done()
		q.ShutDown()
	}()
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return
	}
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if err := o.sync(ctx, key); err != nil {
			klog.V(2).InfoS("Share template owner not recorded yet; retrying", "pod", key, "err", err)
			q.AddRateLimited(key)
		} else {
			q.Forget(key)
		}
		q.Done(key)
	}
}

type templateOwners struct {
	dyn         dynamic.Interface
	templateFor TemplateFor
	store       cache.Store
	mu          sync.Mutex
	done        map[types.UID]bool // pods recorded as their template's owner
}

// forget drops a deleted pod from done.
func (o *templateOwners) forget(obj any) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	if m, ok := obj.(metav1.Object); ok {
		o.mu.Lock()
		delete(o.done, m.GetUID())
		o.mu.Unlock()
	}
}

// sync makes the pod of key an owner of its share template, or creates the template
// again, owned by the pod, when it is gone and the pod's claim is not generated yet.
func (o *templateOwners) sync(ctx context.Context, key string) error {
	obj, exists, err := o.store.GetByKey(key)
	if err != nil || !exists {
		return err
	}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pod); err != nil {
		return err
	}
	name := shareTemplateOf(&pod)
	if name == "" || pod.DeletionTimestamp != nil {
		return nil
	}
	generated := claimGenerated(&pod)
	o.mu.Lock()
	done := o.done[pod.UID]
	o.mu.Unlock()
	if done && generated {
		return nil
	}
	owner := metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID}
	templates := o.dyn.Resource(templatesGVR).Namespace(pod.Namespace)
	cur, err := templates.Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err) && generated:
		err = nil // the pod's claim exists: it needs no template
	case apierrors.IsNotFound(err):
		err = o.recreate(ctx, &pod, name, owner)
	case err == nil && !ownedBy(cur.GetOwnerReferences(), pod.UID) && len(cur.GetOwnerReferences()) < maxTemplateOwners:
		// A strategic merge patch merges ownerReferences by uid: it adds this one.
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"ownerReferences": []metav1.OwnerReference{owner}}})
		_, err = templates.Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{})
	case err == nil && !ownedBy(cur.GetOwnerReferences(), pod.UID):
		// Full: the owners that still matter and this pod, written against the
		// version read (a conflict retries through the queue).
		cur.SetOwnerReferences(o.prune(pod.Namespace, cur.GetOwnerReferences(), owner))
		_, err = templates.Update(ctx, cur, metav1.UpdateOptions{})
	}
	if err != nil {
		return err
	}
	o.mu.Lock()
	o.done[pod.UID] = true
	o.mu.Unlock()
	return nil
}

// maxTemplateOwners bounds a template's ownerReferences. Recording every pod of a
// shape made a template grow with its live pods, rewritten whole on each new one:
// about 10,000 pods of one shape in a namespace would have reached the API server's
// object size limit, and a drain of them wrote O(pods²) bytes to etcd. Only two
// kinds of owner matter: pods whose claim is not generated yet (they still need the
// template) and the newest pod (it keeps the template for the pods to come). Once a
// template has this many owners, each new owner prunes the others to those.
const maxTemplateOwners = 16

// prune is refs without the pods that no longer need the template (gone, or their
// claim generated), plus owner; at most maxTemplateOwners, the newest kept.
func (o *templateOwners) prune(ns string, refs []metav1.OwnerReference, owner metav1.OwnerReference) []metav1.OwnerReference {
	var others, pods []metav1.OwnerReference
	for _, r := range refs {
		if r.Kind != "Pod" || r.APIVersion != "v1" {
			others = append(others, r) // not ours to prune
			continue
		}
		if pod, ok := o.pod(ns, r.Name); ok && pod.UID == r.UID && !claimGenerated(pod) {
			pods = append(pods, r)
		}
	}
	pods = append(pods, owner)
	return append(others, pods[max(0, len(pods)-maxTemplateOwners):]...)
}

// pod is the labelled pod ns/name from the informer's store.
func (o *templateOwners) pod(ns, name string) (*corev1.Pod, bool) {
	obj, exists, err := o.store.GetByKey(ns + "/" + name)
	if err != nil || !exists {
		return nil, false
	}
	var pod corev1.Pod
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(obj.(*unstructured.Unstructured).Object, &pod); err != nil {
		return nil, false
	}
	return &pod, true
}

// recreate creates the template a pod still needs, owned by the pod, under the name
// the pod refers to (a fraction's content follows the cluster's GPU sizes now).
func (o *templateOwners) recreate(ctx context.Context, pod *corev1.Pod, name string, owner metav1.OwnerReference) error {
	tmpl, err := o.templateFor(ctx, pod)
	if err != nil {
		return err
	}
	tmpl.Name, tmpl.Namespace = name, pod.Namespace
	tmpl.OwnerReferences = []metav1.OwnerReference{owner}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(tmpl)
	if err != nil {
		return err
	}
	_, err = o.dyn.Resource(templatesGVR).Namespace(pod.Namespace).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("template %s/%s appeared meanwhile: record the owner next time", pod.Namespace, name)
	}
	return err
}

// shareTemplateOf is the template of the pod's ShareClaimRef entry, or "".
func shareTemplateOf(pod *corev1.Pod) string {
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name == ShareClaimRef && pc.ResourceClaimTemplateName != nil {
			return *pc.ResourceClaimTemplateName
		}
	}
	return ""
}

// claimGenerated reports whether kube-controller-manager made the pod's share claim.
func claimGenerated(pod *corev1.Pod) bool {
	for _, s := range pod.Status.ResourceClaimStatuses {
		if s.Name == ShareClaimRef && s.ResourceClaimName != nil {
			return true
		}
	}
	return false
}

func ownedBy(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}
