package invariant

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
)

// gpuUse is one pod's use of one GPU index, read from the gantry.dev/gpus annotation
// ("INDEX[:BYTES],…").
type gpuUse struct {
	index int
	bytes int64 // 0 for a whole GPU
}

// parseGPUAnnotation reads gantry.dev/gpus. An entry it cannot read is an error: the
// scheduler wrote it, and a GPU it cannot account for is a GPU that may be given twice.
func parseGPUAnnotation(s string) ([]gpuUse, error) {
	if s == "" {
		return nil, nil
	}
	var out []gpuUse
	for _, part := range strings.Split(s, ",") {
		idx, bytes, share := strings.Cut(part, ":")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			return nil, fmt.Errorf("entry %q: index is not a number ≥ 0", part)
		}
		u := gpuUse{index: i}
		if share {
			n, err := strconv.ParseInt(bytes, 10, 64)
			if err != nil || n <= 0 {
				return nil, fmt.Errorf("entry %q: bytes are not a number > 0", part)
			}
			u.bytes = n
		}
		out = append(out, u)
	}
	return out, nil
}

// GPUOvercommits returns a violation for every node whose GPUs are given out beyond
// what it has, by Gantry's pods and any other scheduler's:
//   - a GPU index held whole by one pod and also held (whole or shared) by another;
//   - memory shares of one GPU adding up to more than its memory (GFD label);
//   - an index at or above the node's nvidia.com/gpu count;
//   - more GPUs in use than the node has: the distinct indices Gantry recorded plus the
//     nvidia.com/gpu requests of pods without a recorded index (kube-scheduler's);
//
// and for every DRA device allocated to more claims than it allows, or with shares
// adding up to more than its capacity.
func GPUOvercommits(s *State) []Violation {
	byNode := map[string][]*corev1.Pod{}
	for _, p := range s.Pods {
		if holdsResources(p) {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	var out []Violation
	for _, n := range s.Nodes {
		out = append(out, nodeOvercommits(s, n, byNode[n.Name])...)
	}
	out = append(out, claimOvercommits(s)...)
	sortViolations(out)
	return out
}

func nodeOvercommits(s *State, n *corev1.Node, pods []*corev1.Pod) []Violation {
	capacity := int64(0)
	if q, ok := n.Status.Allocatable[resourceGPU]; ok {
		capacity = q.Value()
	}
	memBytes := int64(0)
	if mib, err := strconv.ParseInt(n.Labels[labelGFDMemoryMiB], 10, 64); err == nil && mib > 0 {
		memBytes = mib << 20
	}
	type holders struct {
		whole  []string
		shared []string
		bytes  int64
	}
	perIndex := map[int]*holders{}
	var counted int64
	var counters []string
	var out []Violation
	bad := func(subject, format string, args ...any) {
		out = append(out, Violation{Kind: GPUOvercommit, Subject: subject, Message: fmt.Sprintf(format, args...), At: s.Now})
	}
	for _, p := range pods {
		uses, err := parseGPUAnnotation(p.Annotations[annotationGPUs])
		if err != nil {
			bad("pod "+podKey(p), "unreadable %s=%q on a bound pod: %v", annotationGPUs, p.Annotations[annotationGPUs], err)
			continue
		}
		if len(uses) == 0 {
			if c := gpuRequest(p); c > 0 {
				counted += c
				counters = append(counters, fmt.Sprintf("%s×%d", podKey(p), c))
			}
			continue
		}
		for _, u := range uses {
			h := perIndex[u.index]
			if h == nil {
				h = &holders{}
				perIndex[u.index] = h
			}
			if u.bytes == 0 {
				h.whole = append(h.whole, podKey(p))
			} else {
				h.shared = append(h.shared, podKey(p))
				h.bytes += u.bytes
			}
		}
	}
	indices := make([]int, 0, len(perIndex))
	for i := range perIndex {
		indices = append(indices, i)
	}
	sort.Ints(indices)
	for _, i := range indices {
		h := perIndex[i]
		subject := fmt.Sprintf("node %s gpu %d", n.Name, i)
		if int64(i) >= capacity {
			bad(subject, "index %d given out on a node with %d nvidia.com/gpu (pods %s)", i, capacity, joinSorted(append(h.whole, h.shared...)))
		}
		if len(h.whole) > 1 || (len(h.whole) == 1 && len(h.shared) > 0) {
			bad(subject, "held whole by %s and also by %s", h.whole[0], joinSorted(append(h.whole[1:], h.shared...)))
		}
		if memBytes > 0 && h.bytes > memBytes {
			bad(subject, "memory shares add up to %d bytes on a GPU of %d bytes (pods %s)", h.bytes, memBytes, joinSorted(h.shared))
		}
	}
	if used := int64(len(perIndex)) + counted; used > capacity && used > 0 {
		bad("node "+n.Name, "%d GPUs in use (%d by index, %d counted: %s) on a node with %d nvidia.com/gpu",
			used, len(perIndex), counted, joinSorted(counters), capacity)
	}
	return out
}

// deviceKey names one DRA device.
type deviceKey struct{ driver, pool, device string }

func (k deviceKey) String() string { return k.driver + "/" + k.pool + "/" + k.device }

// claimOvercommits checks DRA allocations: a device allocated without a share ID is
// held exclusively, so any second allocation of it is an over-commit; shares of a
// device with consumable capacity must fit its capacity.
func claimOvercommits(s *State) []Violation {
	type device struct {
		exclusive []string
		shared    []string
		consumed  map[resourcev1.QualifiedName]int64
	}
	devices := map[deviceKey]*device{}
	for _, c := range s.Claims {
		if c.Status.Allocation == nil {
			continue
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			k := deviceKey{r.Driver, r.Pool, r.Device}
			d := devices[k]
			if d == nil {
				d = &device{consumed: map[resourcev1.QualifiedName]int64{}}
				devices[k] = d
			}
			who := c.Namespace + "/" + c.Name
			if r.ShareID == nil {
				d.exclusive = append(d.exclusive, who)
				continue
			}
			d.shared = append(d.shared, who)
			for name, q := range r.ConsumedCapacity {
				d.consumed[name] += q.Value()
			}
		}
	}
	capacities := sliceCapacities(s.Slices)
	var out []Violation
	for k, d := range devices {
		subject := "device " + k.String()
		if len(d.exclusive) > 1 || (len(d.exclusive) == 1 && len(d.shared) > 0) {
			out = append(out, Violation{Kind: GPUOvercommit, Subject: subject, At: s.Now,
				Message: fmt.Sprintf("allocated exclusively to %s and also to %s", d.exclusive[0], joinSorted(append(d.exclusive[1:], d.shared...)))})
		}
		for name, used := range d.consumed {
			if limit, ok := capacities[k][name]; ok && used > limit {
				out = append(out, Violation{Kind: GPUOvercommit, Subject: subject, At: s.Now,
					Message: fmt.Sprintf("claims %s consume %d of capacity %s, the device has %d", joinSorted(d.shared), used, name, limit)})
			}
		}
	}
	return out
}

func sliceCapacities(slices []*resourcev1.ResourceSlice) map[deviceKey]map[resourcev1.QualifiedName]int64 {
	out := map[deviceKey]map[resourcev1.QualifiedName]int64{}
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			caps := map[resourcev1.QualifiedName]int64{}
			for name, c := range d.Capacity {
				caps[name] = c.Value.Value()
			}
			out[deviceKey{sl.Spec.Driver, sl.Spec.Pool.Name, d.Name}] = caps
		}
	}
	return out
}
