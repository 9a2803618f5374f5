package webhook

import (
	"context"
	"fmt"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// sharePod is a labelled pod of template tmpl, its claim generated or not.
func sharePod(t *testing.T, name, tmpl string, generated bool) *unstructured.Unstructured {
	t.Helper()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: ShareClaimRef, ResourceClaimTemplateName: ptr.To(tmpl)}}}}
	if generated {
		pod.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: ShareClaimRef, ResourceClaimName: ptr.To(name + "-share")}}
	}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: u}
}

func podOwner(name string) metav1.OwnerReference {
	return metav1.OwnerReference{APIVersion: "v1", Kind: "Pod", Name: name, UID: types.UID("uid-" + name)}
}

// A template holds at most maxTemplateOwners owners. Once full, a new owner keeps
// only the pods that still need the template (claim not generated) and itself:
// every pod of a shape as an owner made the template grow with its live pods, up to
// the API server's object size limit at about 10,000.
func TestTemplateOwnersStayBounded(t *testing.T) {
	const tmpl = "gantry-share-10gi"
	store := cache.NewStore(cache.MetaNamespaceKeyFunc)
	var refs []metav1.OwnerReference
	for i := range maxTemplateOwners {
		name := fmt.Sprintf("p%02d", i)
		refs = append(refs, podOwner(name))
		switch {
		case i == 3: // gone: not in the store
		case i == 5 || i == 9: // still waiting for its claim
			_ = store.Add(sharePod(t, name, tmpl, false))
		default:
			_ = store.Add(sharePod(t, name, tmpl, true))
		}
	}
	refs = append(refs, metav1.OwnerReference{APIVersion: "ray.io/v1", Kind: "RayCluster", Name: "rc", UID: "uid-rc"})
	template := &resourceapi.ResourceClaimTemplate{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: tmpl, OwnerReferences: refs}}
	scheme := runtime.NewScheme()
	_ = resourceapi.AddToScheme(scheme)
	dyn := dynamicfake.NewSimpleDynamicClient(scheme, template)
	o := &templateOwners{dyn: dyn, store: store, done: map[types.UID]bool{}}

	newcomer := sharePod(t, "new", tmpl, false)
	_ = store.Add(newcomer)
	if err := o.sync(context.Background(), "ns/new"); err != nil {
		t.Fatal(err)
	}
	got, err := dyn.Resource(templatesGVR).Namespace("ns").Get(context.Background(), tmpl, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, r := range got.GetOwnerReferences() {
		names = append(names, r.Name)
	}
	if want := []string{"rc", "p05", "p09", "new"}; !slices.Equal(names, want) {
		t.Errorf("owners %v, want %v (the other owner kind, the pods still waiting for their claim, the new pod)", names, want)
	}

	// More pods waiting than the bound: the newest are kept.
	var waiting []metav1.OwnerReference
	for i := range maxTemplateOwners + 4 {
		name := fmt.Sprintf("w%02d", i)
		waiting = append(waiting, podOwner(name))
		_ = store.Add(sharePod(t, name, tmpl, false))
	}
	kept := o.prune("ns", waiting, podOwner("last"))
	if len(kept) != maxTemplateOwners || kept[0].Name != "w05" || kept[len(kept)-1].Name != "last" {
		t.Errorf("kept %d owners from %s to %s, want %d from w05 to last", len(kept), kept[0].Name, kept[len(kept)-1].Name, maxTemplateOwners)
	}
}
