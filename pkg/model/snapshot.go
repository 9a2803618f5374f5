package model

import (
	"sort"
	"sync"
)

// Gang is a set of pods that start together: at least MinMember of them are bound
// in one decision, or none is.
type Gang struct {
	ID       GangID
	Queue    string
	Priority int32
	// PriorityClassName names the priority for people ("inference"); may be empty.
	PriorityClassName string
	Preemptible       bool
	// NeverPreempts is set when a member's spec.preemptionPolicy is Never (its
	// PriorityClass's, copied at admission): the gang evicts no pod to make room,
	// as kube-scheduler's DefaultPreemption skips such a preemptor.
	NeverPreempts bool
	// MinMember is how many members must be placed together. Members above it are
	// elastic.
	MinMember int
	// Members are the gang's pods that exist now, bound or pending.
	Members []PodID
	// Succeeded counts members that finished successfully: they count towards
	// MinMember (a completing gang is not below its minimum) but hold nothing.
	Succeeded int
	// Missing says why the gang must wait for pods that do not exist yet (for example
	// "waiting for 2 of 3 pods to be created"); empty when all MinMember pods exist.
	Missing string
	// CreatedAt orders gangs of equal standing first-come first-served.
	CreatedAt int64
}

// ResourceName names a resource that queues divide: "gpu", "cpu", "memory", or
// "gpu/<model>" for a per-model GPU quota.
type ResourceName string

const (
	ResourceGPU    ResourceName = "gpu"
	ResourceCPU    ResourceName = "cpu"
	ResourceMemory ResourceName = "memory"
)

// GPUModelResource names the per-model GPU resource of a queue.
// The names are interned: every cycle charges every pod, and a fresh string per pod
// would be garbage.
func GPUModelResource(model string) ResourceName {
	if r, ok := gpuModelResources.Load(model); ok {
		return r.(ResourceName)
	}
	r := ResourceName("gpu/" + model)
	gpuModelResources.Store(model, r)
	return r
}

var gpuModelResources sync.Map

// Unlimited is the value of a quota, limit or weight that sets no bound.
const Unlimited = -1

// QueueResource bounds one resource of a queue. Amounts are in the resource's unit:
// GPUs (fractions allowed) for gpu, millicores for cpu, bytes for memory.
type QueueResource struct {
	// Quota is guaranteed to the queue when it has demand; Unlimited means the queue is
	// entitled to whatever its parent has.
	Quota float64
	// Limit caps use, borrowed capacity included; Unlimited means no cap.
	Limit float64
	// OverQuotaWeight is the queue's share of spare capacity among siblings of equal
	// priority.
	OverQuotaWeight float64
}

// Queue is a node of the queue tree. Only leaf queues hold pods.
type Queue struct {
	Name      string
	Parent    string
	Priority  int32
	Resources map[ResourceName]QueueResource
}

// Snapshot is the cluster as one scheduling cycle sees it.
type Snapshot struct {
	Nodes  []*Node
	Pods   map[PodID]*Pod
	Gangs  map[GangID]*Gang
	Queues map[string]*Queue
	// Now is the snapshot's time in seconds since the same epoch as Pod.StartedAt.
	Now int64
	// PendingGangs, when not nil, is an index of the gangs that have pending members,
	// kept by whoever maintains the snapshot; a cycle then looks at these only. Nil
	// means every gang is looked at.
	PendingGangs map[GangID]struct{}
	// DefaultQueue is the queue that pods and gangs with no queue are charged to (the
	// scheduler's config names it); empty leaves them uncharged. While it is not in
	// Queues (an admin deleted it, or the install leaves creating it to them), work
	// with no queue waits, as work in any missing queue does: it never escapes quota.
	DefaultQueue string
	// NamespaceLabels are the labels of each namespace, for affinity terms with a
	// namespaceSelector; nil when no such term is in use.
	NamespaceLabels map[string]map[string]string

	nodeIndex map[string]int
	// counts are NodeCounts, kept by AddNode and RemoveNode: a node in a snapshot is
	// replaced, never changed in place (Book and Unbook go to a Clone), so these two
	// see every change. A cycle reads them instead of visiting every node.
	counts NodeCounts
}

// NodeCounts count a snapshot's nodes by what lets a pod with no constraints skip
// the inter-pod and taint checks: nodes holding a pod with scoring affinity terms,
// nodes holding a pod with required anti-affinity, and nodes with a
// PreferNoSchedule taint.
type NodeCounts struct {
	Affinity, AntiAffinity, SoftTainted int
}

// Add adds sign times n's share of c: a view that replaces a node takes the old
// one out (-1) and puts the new one in (+1).
func (c *NodeCounts) Add(n *Node, sign int) {
	if n.AffinityPods > 0 {
		c.Affinity += sign
	}
	if n.AntiAffinityPods > 0 {
		c.AntiAffinity += sign
	}
	if n.SoftTainted() {
		c.SoftTainted += sign
	}
}

// CountNodes counts nodes from scratch, what NodeCounts keeps up to date.
func CountNodes(nodes []*Node) NodeCounts {
	var c NodeCounts
	for _, n := range nodes {
		c.Add(n, 1)
	}
	return c
}

// NodeCounts returns the counts of the snapshot's nodes, in constant time.
func (s *Snapshot) NodeCounts() NodeCounts { return s.counts }

// NewSnapshot returns an empty snapshot.
func NewSnapshot() *Snapshot {
	return &Snapshot{
		Pods:      map[PodID]*Pod{},
		Gangs:     map[GangID]*Gang{},
		Queues:    map[string]*Queue{},
		nodeIndex: map[string]int{},
	}
}

// AddNode adds or replaces a node.
func (s *Snapshot) AddNode(n *Node) {
	if s.nodeIndex == nil {
		s.nodeIndex = map[string]int{}
	}
	s.counts.Add(n, 1)
	if i, ok := s.nodeIndex[n.Name]; ok {
		s.counts.Add(s.Nodes[i], -1)
		s.Nodes[i] = n
		return
	}
	s.nodeIndex[n.Name] = len(s.Nodes)
	s.Nodes = append(s.Nodes, n)
}

// Node returns the named node, or nil.
func (s *Snapshot) Node(name string) *Node {
	i, ok := s.nodeIndex[name]
	if !ok {
		return nil
	}
	return s.Nodes[i]
}

// NodeIndex returns the position of the named node in Nodes, or -1.
func (s *Snapshot) NodeIndex(name string) int {
	if i, ok := s.nodeIndex[name]; ok {
		return i
	}
	return -1
}

// QueueOf is the queue work labelled with queue is charged to: queue itself, or
// DefaultQueue for work with none, whether or not that queue exists.
func (s *Snapshot) QueueOf(queue string) string {
	if queue == "" && s.DefaultQueue != "" {
		return s.DefaultQueue
	}
	return queue
}

// GangPods returns the gang's existing pods in a stable order.
func (s *Snapshot) GangPods(g *Gang) []*Pod {
	pods := make([]*Pod, 0, len(g.Members))
	for _, id := range g.Members {
		if p := s.Pods[id]; p != nil {
			pods = append(pods, p)
		}
	}
	sort.Slice(pods, func(i, j int) bool { return pods[i].ID < pods[j].ID })
	return pods
}

// RemoveNode removes the named node; the last node takes its position.
func (s *Snapshot) RemoveNode(name string) {
	i, ok := s.nodeIndex[name]
	if !ok {
		return
	}
	s.counts.Add(s.Nodes[i], -1)
	last := len(s.Nodes) - 1
	if i != last {
		s.Nodes[i] = s.Nodes[last]
		s.nodeIndex[s.Nodes[i].Name] = i
	}
	s.Nodes[last] = nil
	s.Nodes = s.Nodes[:last]
	delete(s.nodeIndex, name)
}
