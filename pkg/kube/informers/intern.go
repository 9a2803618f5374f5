package informers

import (
	"slices"
	"strconv"
	"sync"

	corev1 "k8s.io/api/core/v1"
)

// maxInterned bounds each table of an interner: past it the table starts afresh
// (values already shared stay shared), so a cluster whose pods are all different
// costs a bounded table, not one entry per pod.
const maxInterned = 4096

// interner shares identical read-only values among slim pods: the requests of a
// container, a pod's slim container slice, its tolerations and its node selector.
// 100,000 pods of one shape then hold one requests map (a Go map of up to 8
// entries is ~630 B), one container slice and one pair of default tolerations
// instead of 100,000 of each (issue 21). Nothing in Gantry writes these values
// of a pod it did not copy first (informer objects are read-only, client-go's
// contract; the placement's gang domains clone a node selector before adding to
// it), so sharing them is safe; a value is found by its content, never by the pod.
type interner struct {
	mu          sync.Mutex
	key         []byte
	lists       map[string]corev1.ResourceList
	containers  map[string][]corev1.Container
	tolerations map[string][]corev1.Toleration
	selectors   map[string]map[string]string
}

func newInterner() *interner {
	return &interner{
		lists:       map[string]corev1.ResourceList{},
		containers:  map[string][]corev1.Container{},
		tolerations: map[string][]corev1.Toleration{},
		selectors:   map[string]map[string]string{},
	}
}

// shared is the pod transform's interner.
var shared = newInterner()

// pod replaces the slim pod's values by identical ones already held, or records
// its own. out must be a slim pod no one else holds yet.
func (in *interner) pod(out *corev1.Pod) {
	in.mu.Lock()
	defer in.mu.Unlock()
	out.Spec.Containers = in.containerSlice(out.Spec.Containers)
	out.Spec.InitContainers = in.containerSlice(out.Spec.InitContainers)
	if len(out.Spec.Tolerations) > 0 {
		in.key = tolerationsKey(in.key[:0], out.Spec.Tolerations)
		out.Spec.Tolerations = lookupOrAdd(in.tolerations, in.key, out.Spec.Tolerations)
	}
	if len(out.Spec.NodeSelector) > 0 {
		in.key = stringMapKey(in.key[:0], out.Spec.NodeSelector)
		out.Spec.NodeSelector = lookupOrAdd(in.selectors, in.key, out.Spec.NodeSelector)
	}
}

// containerSlice shares each container's requests and, when the containers carry
// nothing but names, restart policies and requests (no claims, host ports or
// restart rules), the whole slice.
func (in *interner) containerSlice(cs []corev1.Container) []corev1.Container {
	plain := true
	for i := range cs {
		r := &cs[i].Resources
		if len(r.Requests) > 0 {
			in.key = resourceListKey(in.key[:0], r.Requests)
			r.Requests = lookupOrAdd(in.lists, in.key, r.Requests)
		}
		if len(r.Claims) > 0 || len(cs[i].Ports) > 0 || len(cs[i].RestartPolicyRules) > 0 {
			plain = false
		}
	}
	if len(cs) == 0 || !plain {
		return cs
	}
	k := in.key[:0]
	for i := range cs {
		k = append(k, cs[i].Name...)
		k = append(k, 0)
		if rp := cs[i].RestartPolicy; rp != nil {
			k = append(k, *rp...)
		}
		k = append(k, 0)
		k = resourceListKey(k, cs[i].Resources.Requests)
		k = append(k, 1)
	}
	in.key = k
	return lookupOrAdd(in.containers, k, cs)
}

// lookupOrAdd returns the value held under key, or holds v under it.
func lookupOrAdd[V any](table map[string]V, key []byte, v V) V {
	if held, ok := table[string(key)]; ok {
		return held
	}
	if len(table) >= maxInterned {
		clear(table)
	}
	table[string(key)] = v
	return v
}

// resourceListKey appends the list's names and canonical quantities, by name.
func resourceListKey(k []byte, l corev1.ResourceList) []byte {
	names := make([]corev1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		q := l[n]
		k = append(k, n...)
		k = append(k, '=')
		k = append(k, q.String()...)
		k = append(k, 0)
	}
	return k
}

func tolerationsKey(k []byte, ts []corev1.Toleration) []byte {
	for _, t := range ts {
		k = append(k, t.Key...)
		k = append(k, 0)
		k = append(k, t.Operator...)
		k = append(k, 0)
		k = append(k, t.Value...)
		k = append(k, 0)
		k = append(k, t.Effect...)
		k = append(k, 0)
		if t.TolerationSeconds != nil {
			k = strconv.AppendInt(k, *t.TolerationSeconds, 10)
		} else {
			k = append(k, '-')
		}
		k = append(k, 1)
	}
	return k
}

func stringMapKey(k []byte, m map[string]string) []byte {
	keys := make([]string, 0, len(m))
	for key := range m {
		keys = append(keys, key)
	}
	slices.Sort(keys)
	for _, key := range keys {
		k = append(k, key...)
		k = append(k, 0)
		k = append(k, m[key]...)
		k = append(k, 0)
	}
	return k
}
