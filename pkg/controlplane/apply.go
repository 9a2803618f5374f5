package controlplane

import (
	"context"
	"fmt"
	"os"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/yaml"
)

// ApplyFile creates or updates every object in a YAML file, as `kubectl apply` would
// for new objects. Namespaced objects without a namespace go to namespace.
func ApplyFile(ctx context.Context, cfg *rest.Config, namespace, path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Apply(ctx, cfg, namespace, b)
}

// Apply creates or updates every object in a YAML stream.
func Apply(ctx context.Context, cfg *rest.Config, namespace string, manifest []byte) ([]*unstructured.Unstructured, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	docs, err := splitYAML(manifest, "manifest")
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range docs {
		obj := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &obj.Object); err != nil {
			return nil, fmt.Errorf("apply: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return nil, fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		var ri dynamic.ResourceInterface = dyn.Resource(mapping.Resource)
		if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(namespace)
			}
			ri = dyn.Resource(mapping.Resource).Namespace(obj.GetNamespace())
		}
		created, err := ri.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Controllers may write the object (its status) between our read and
			// write: retry on conflict, as kubectl apply does.
			err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
				cur, gerr := ri.Get(ctx, obj.GetName(), metav1.GetOptions{})
				if gerr != nil {
					return gerr
				}
				obj.SetResourceVersion(cur.GetResourceVersion())
				var uerr error
				created, uerr = ri.Update(ctx, obj, metav1.UpdateOptions{})
				return uerr
			})
		}
		if err != nil {
			return nil, fmt.Errorf("apply %s %s: %w", gvk.Kind, obj.GetName(), err)
		}
		out = append(out, created)
	}
	return out, nil
}
