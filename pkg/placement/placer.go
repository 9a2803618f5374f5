package placement

import (
	"cmp"
	"encoding/binary"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// DefaultPolicy is the policy New("") returns.
const DefaultPolicy = "fgd"

// Policies lists the policy names New accepts, the default first.
func Policies() []string {
	names := make([]string, 0, len(policies))
	for _, p := range policies {
		names = append(names, p.name)
	}
	return names
}

var policies = []struct {
	name string
	make func() policy
}{
	{DefaultPolicy, func() policy { return &fgdPolicy{} }},
	{"fgd-classic", func() policy { return &fgdPolicy{classic: true} }},
	{"bestfit", func() policy { return bestFitPolicy{} }},
	{"spread", func() policy { return spreadPolicy{} }},
}

// policy ranks the nodes that can take a pod.
type policy interface {
	// compile prepares the workload mix the policy scores against; scarcity, when
	// not nil, weighs each shape further (see Placer.adaptTo); capacity is the
	// cluster's, when known.
	compile(shapes []Shape, scarcity []float64, capacity clusterCapacity) workload
	// rank scores node n, which can take the pod (lower is better), and says which
	// GPU a single share would take there (-1 when bindGPUs decides).
	rank(p *Placer, c *nodeCache, n *model.Node, q *podQuery) (rank, int)
	// weighsScarcity reports whether the mix is weighed by how few nodes each shape
	// fits (see Placer.adaptTo).
	weighsScarcity() bool
}

// rank orders candidate nodes: lower is better, compared element by element.
type rank [3]float64

func (r rank) less(o rank) bool {
	for i := range r {
		if r[i] != o[i] {
			return r[i] < o[i]
		}
	}
	return false
}

// Placer chooses nodes and GPUs for pods under one scoring policy. It caches what
// it computed about each node, keyed by the node's pointer, so that placing many pods
// rescores only the nodes that changed. A View never changes a node in place; code
// that changes a node outside a View must likewise put a new *model.Node in the
// snapshot (Snapshot.AddNode) rather than edit the old one, or a Placer may go on
// using what it computed for the old state. A Placer is not safe for concurrent use;
// use one per goroutine.
type Placer struct {
	policyName string
	policy     policy
	workload   workload
	// shapes is the mix as set or learned; workload is compiled from it, weighted
	// by scarcity for the snapshot scarcityOf, unless stale.
	shapes     []Shape
	scarcityOf *model.Snapshot
	stale      bool
	// kinds are scarcityOf's GPU nodes, alike ones merged; scarcityByShape
	// memoizes each shape's scarcity on them.
	kinds           nodeKinds
	scarcityByShape map[shapeKey]float64
	// learner, when not nil, learns shapes from the pods that arrive (NewOnline).
	learner *mixLearner
	// generation changes with the workload; cached scores of another generation
	// are stale.
	generation uint64
	cache      []nodeCache

	// domains caches topology domain indexes for constraint checks.
	domains domainCache
	// ranks index the nodes by rank for plain pods (rankindex.go).
	ranks rankIndexes

	// scratch buffers, reused across nodes
	cands []candidate
	slots []gpuSlot
	wfit  []float64
}

// nodeCache is what a Placer knows about one node in one state.
type nodeCache struct {
	node       *model.Node
	generation uint64
	// frag is the node's expected fragmentation as it is, when fragValid.
	fragValid bool
	frag      float64
	// verdicts for the last few pod shapes checked here, replaced round robin: pods
	// of a few shapes (replicas, gang members, a workload's common shapes) are scored
	// once per node state.
	verdicts    [verdictsPerNode]verdict
	nextVerdict int
}

const verdictsPerNode = 8

// verdict is whether a pod shape fits a node, and if so its rank there.
type verdict struct {
	valid  bool
	key    shapeKey
	misfit misfit
	rank   rank
	gpu    int
}

// verdict returns the cached verdict for a shape, computing it on a miss. A pod
// with DeviceChoices is not a shape other pods share, so its verdict is not cached.
func (p *Placer) verdict(c *nodeCache, n *model.Node, q *podQuery) *verdict {
	if q.chosen != nil {
		v := &verdict{valid: true, misfit: q.terms.resourceMisfit(n)}
		if v.misfit == fits {
			v.rank, v.gpu = p.policy.rank(p, c, n, q)
		}
		return v
	}
	for i := range c.verdicts {
		if v := &c.verdicts[i]; v.valid && v.key == q.key {
			return v
		}
	}
	v := &c.verdicts[c.nextVerdict]
	c.nextVerdict = (c.nextVerdict + 1) % verdictsPerNode
	*v = verdict{valid: true, key: q.key, misfit: q.terms.resourceMisfit(n)}
	if v.misfit == fits {
		v.rank, v.gpu = p.policy.rank(p, c, n, q)
	}
	return v
}

// New returns a Placer for the named policy: "fgd" (the default, also for ""),
// fragmentation-aware; "fgd-classic", FGD as published (ATC '23), kept as a
// yardstick; "bestfit", the node left with the least free GPU; "spread", the least
// allocated node.
func New(policyName string) (*Placer, error) {
	if policyName == "" {
		policyName = DefaultPolicy
	}
	for _, p := range policies {
		if p.name == policyName {
			pl := &Placer{policyName: policyName, policy: p.make()}
			pl.SetWorkload(DefaultWorkload())
			return pl, nil
		}
	}
	return nil, fmt.Errorf("unknown placement policy %q: valid policies are %s", policyName, strings.Join(Policies(), ", "))
}

// Policy returns the policy's name.
func (p *Placer) Policy() string { return p.policyName }

// SetWorkload fixes the mix of pod shapes that fragmentation is measured against
// (ShapesOf makes one from pods), and stops learning it. An empty mix restores
// DefaultWorkload. The default policy further weighs each shape by how few nodes of
// the cluster it fits, once per snapshot it places on. The scheduler does not call
// it: it learns the mix (NewOnline); a fixed mix is for tests and research.
func (p *Placer) SetWorkload(shapes []Shape) {
	if len(shapes) == 0 {
		shapes = DefaultWorkload()
	}
	p.learner = nil
	p.setShapes(append([]Shape(nil), shapes...))
}

// setShapes replaces the mix; it is compiled before the next placement.
func (p *Placer) setShapes(shapes []Shape) {
	p.shapes = shapes
	p.stale = true
}

// podQuery is a pod prepared for placement.
type podQuery struct {
	terms    *podTerms
	key      shapeKey
	demand   model.GPUDemand
	requests model.Resources
	// chosen is Pod.DeviceChoices: the GPUs the pod takes on each node it may use.
	chosen map[string][]model.GPUBinding
}

func newPodQuery(pod *model.Pod) *podQuery {
	t := newPodTerms(pod)
	return &podQuery{terms: t, key: keyOfShape(t.requests, pod.GPU), demand: pod.GPU, requests: t.requests, chosen: pod.DeviceChoices}
}

// sizeCache makes room for the view's nodes at once. A nodeCache is 1,000 bytes;
// grown as the first scan reached each node, doubling, the cache of 5,000 nodes was
// copied 13 times, a third of the first cycle of gang-5k (issue 21).
func (p *Placer) sizeCache(v *View) {
	if n := len(v.nodes); n > len(p.cache) {
		p.cache = append(p.cache, make([]nodeCache, n-len(p.cache))...)
	}
}

// cacheFor returns what the Placer knows of node i of the view sizeCache was given.
func (p *Placer) cacheFor(i int, n *model.Node) *nodeCache {
	c := &p.cache[i]
	if c.node != n || c.generation != p.generation {
		*c = nodeCache{node: n, generation: p.generation}
	}
	return c
}

// PlacePod chooses a node and GPUs for pod in v. It does not assign: the caller
// calls v.Assign with the result.
func (p *Placer) PlacePod(v *View, pod *model.Pod) (Placement, *Unschedulable) {
	p.adaptTo(v)
	p.sizeCache(v)
	q := newPodQuery(pod)
	cs := newConstraintState(v, pod, q.terms, &p.domains)
	best, bestGPU := -1, -1
	var bestRank rank
	cands := p.cands[:0]
	nodes := v.nodes
	if b, g, ok := p.indexedBest(v, q, cs); ok {
		best, bestGPU, nodes = b, g, nil // the scan below has nothing left to do
	}
	for i, n := range nodes {
		c := p.cacheFor(i, n)
		if (n.Unschedulable || q.terms.affinity != nil || len(n.Taints) > 0 || q.chosen != nil) && q.terms.staticMisfit(n) != fits {
			continue
		}
		if cs != nil && cs.misfit(i, n) != fits {
			continue
		}
		verdict := p.verdict(c, n, q)
		if verdict.misfit != fits {
			continue
		}
		if cs != nil && cs.scoring {
			cands = append(cands, candidate{i, verdict.rank, verdict.gpu})
			continue
		}
		// Equal ranks go to the first node in snapshot order, so a placement is
		// reproducible.
		if best < 0 || verdict.rank.less(bestRank) {
			best, bestRank, bestGPU = i, verdict.rank, verdict.gpu
		}
	}
	if len(cands) > 0 {
		best, bestGPU = cs.pick(v, cands)
		p.cands = cands[:0]
	}
	if best < 0 {
		return Placement{}, p.unschedulable(v, q, cs)
	}
	n := v.nodes[best]
	pl := Placement{Pod: pod.ID, Node: n.Name, Volumes: v.claimVolumes(pod, n)}
	if q.chosen != nil {
		pl.GPUs = append([]model.GPUBinding(nil), q.chosen[n.Name]...)
	} else {
		pl.GPUs = bindGPUs(n, pod.GPU, bestGPU)
	}
	return pl, nil
}

func (p *Placer) unschedulable(v *View, q *podQuery, cs *constraintState) *Unschedulable {
	reasons := map[string]int{}
	for i, n := range v.nodes {
		if m := fullMisfit(q, cs, i, n); m != fits {
			reasons[q.terms.reason(n, m)]++
		}
	}
	what := "a pod with " + DescribeDemand(q.terms.pod)
	if len(v.nodes) == 0 {
		return &Unschedulable{Message: "no node fits " + what + ": the cluster has no nodes", Reasons: reasons}
	}
	return &Unschedulable{
		Message: fmt.Sprintf("no node fits %s: of %d nodes, %s", what, len(v.nodes), reasonSummary(reasons)),
		Reasons: reasons,
	}
}

// PlaceGang places all of pods or none. The pods are tried largest first on a fork
// of v; if that fails, once more packing nodes as tightly as possible (best fit),
// which finds room a fragmentation-minded order can miss. On success the
// placements (in the order of pods) are assigned in v.
func (p *Placer) PlaceGang(v *View, pods []*model.Pod) ([]Placement, *Unschedulable) {
	if len(pods) == 0 {
		return nil, nil
	}
	order := make([]int, len(pods))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return CompareDemand(pods[b], pods[a]) })

	attempts := []*Placer{p}
	if p.policyName != "bestfit" {
		packer, _ := New("bestfit") // a known name: cannot fail
		attempts = append(attempts, packer)
	}
	// The message reports the attempt that placed the most members.
	var closest gangAttempt
	for i, placer := range attempts {
		a := placer.tryGang(v, pods, order)
		if a.failed == nil {
			a.fork.Commit()
			return a.placements, nil
		}
		if i == 0 || a.placed > closest.placed {
			closest = a
		}
	}
	if placements, ok := p.placeInOneDomain(v, pods, order); ok {
		return placements, nil
	}
	return nil, gangUnschedulable(pods, closest)
}

// gangAttempt is one try at placing a gang on a fork.
type gangAttempt struct {
	fork       *View
	placements []Placement
	placed     int
	nodes      []string
	// failed is the first member that did not fit, and why.
	failed *Unschedulable
}

// tryGang places members in order; after a failure it goes on with the rest, so
// that the message can say how many members fit at most.
func (p *Placer) tryGang(v *View, pods []*model.Pod, order []int) gangAttempt {
	a := gangAttempt{fork: v.Fork(), placements: make([]Placement, len(pods))}
	seen := map[string]bool{}
	for _, i := range order {
		pl, u := p.PlacePod(a.fork, pods[i])
		if u != nil {
			if a.failed == nil {
				a.failed = u
			}
			continue
		}
		a.fork.Assign(pods[i], pl)
		a.placements[i] = pl
		a.placed++
		if !seen[pl.Node] {
			seen[pl.Node] = true
			a.nodes = append(a.nodes, pl.Node)
		}
	}
	return a
}

// gangUnschedulable says "needs 3 pods with 1 H100 each, at most 2 fit (node-a,
// node-b); the others: 10 insufficient free GPUs".
func gangUnschedulable(pods []*model.Pod, a gangAttempt) *Unschedulable {
	var need string
	kinds := map[string]int{}
	var order []string
	for _, pod := range pods {
		d := DescribeDemand(pod)
		if kinds[d] == 0 {
			order = append(order, d)
		}
		kinds[d]++
	}
	podsWord := func(n int) string {
		if n == 1 {
			return "1 pod"
		}
		return fmt.Sprintf("%d pods", n)
	}
	if len(order) == 1 {
		need = fmt.Sprintf("needs %s with %s", podsWord(len(pods)), order[0])
		if len(pods) > 1 {
			need += " each"
		}
	} else {
		parts := make([]string, len(order))
		for i, d := range order {
			parts[i] = fmt.Sprintf("%d with %s", kinds[d], d)
		}
		need = fmt.Sprintf("needs %s (%s)", podsWord(len(pods)), strings.Join(parts, ", "))
	}
	var fit string
	switch {
	case a.placed == 0:
		fit = "none fits"
	case a.placed == 1:
		fit = fmt.Sprintf("at most 1 fits (%s)", strings.Join(a.nodes, ", "))
	default:
		fit = fmt.Sprintf("at most %d fit (%s)", a.placed, strings.Join(a.nodes, ", "))
	}
	msg := need + ", " + fit
	if a.failed != nil && len(a.failed.Reasons) > 0 {
		msg += "; for the others: " + reasonSummary(a.failed.Reasons)
	}
	var reasons map[string]int
	if a.failed != nil {
		reasons = a.failed.Reasons
	}
	return &Unschedulable{Message: msg, Reasons: reasons}
}

// compareDemand orders pods by how hard they are to place: GPUs first (count, then
// whole before share, then share size), then CPU and memory.
func CompareDemand(a, b *model.Pod) int {
	if c := cmp.Compare(a.GPU.Count, b.GPU.Count); c != 0 {
		return c
	}
	if c := cmp.Compare(demandMilli(a.GPU), demandMilli(b.GPU)); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Requests.MilliCPU, b.Requests.MilliCPU); c != 0 {
		return c
	}
	return cmp.Compare(a.Requests.MemoryBytes, b.Requests.MemoryBytes)
}

// demandMilli sizes one GPU's worth of a demand for ordering: a whole GPU is 1000,
// a memory share is ranked by bytes above any fraction (both are below whole).
func demandMilli(d model.GPUDemand) int64 {
	switch {
	case d.Whole():
		return 1 << 62
	case d.MemoryBytes > 0:
		return d.MemoryBytes
	default:
		return d.FractionMilli
	}
}

// wholeGPUs returns the positions of the GPUs a whole-GPU demand takes on n: the
// first usable ones in index order.
func wholeGPUs(n *model.Node, d model.GPUDemand, buf []int) []int {
	buf = buf[:0]
	for i := range n.GPUs {
		if len(buf) == d.Count {
			break
		}
		if d.AcceptsModel(n.GPUs[i].Model) && gpuFit(&n.GPUs[i], d) == gpuUsable {
			buf = append(buf, i)
		}
	}
	return buf
}

// sharedGPUs returns the positions of the GPUs a share demand of several GPUs
// takes on n: the tightest fits first (best fit), so large free GPUs stay whole.
func sharedGPUs(n *model.Node, d model.GPUDemand) []int {
	var usable []int
	for i := range n.GPUs {
		if d.AcceptsModel(n.GPUs[i].Model) && gpuFit(&n.GPUs[i], d) == gpuUsable {
			usable = append(usable, i)
		}
	}
	sort.SliceStable(usable, func(x, y int) bool {
		gx, gy := &n.GPUs[usable[x]], &n.GPUs[usable[y]]
		return gx.FreeBytes()-d.BytesOn(gx) < gy.FreeBytes()-d.BytesOn(gy)
	})
	if len(usable) > d.Count {
		usable = usable[:d.Count]
	}
	return usable
}

// bindGPUs turns a chosen node (and, for a single share, the chosen GPU position)
// into GPU bindings.
func bindGPUs(n *model.Node, d model.GPUDemand, sharePos int) []model.GPUBinding {
	switch {
	case d.Count == 0:
		return nil
	case d.Whole():
		var bindings []model.GPUBinding
		for _, i := range wholeGPUs(n, d, nil) {
			g := &n.GPUs[i]
			bindings = append(bindings, model.GPUBinding{Index: g.Index, MemoryBytes: g.MemoryBytes, Whole: true})
		}
		return bindings
	case sharePos >= 0 && d.Count == 1:
		g := &n.GPUs[sharePos]
		return []model.GPUBinding{{Index: g.Index, MemoryBytes: d.BytesOn(g)}}
	default:
		var bindings []model.GPUBinding
		for _, i := range sharedGPUs(n, d) {
			g := &n.GPUs[i]
			bindings = append(bindings, model.GPUBinding{Index: g.Index, MemoryBytes: d.BytesOn(g)})
		}
		return bindings
	}
}

// maxScarcity caps how much more a shape weighs for fitting few nodes, so that a
// rare shape that fits one node in a thousand cannot outweigh the rest of the mix.
const maxScarcity = 10

// adaptTo compiles the mix when it changed and, for the default policy, once per
// snapshot, weighs it by the scarcity of the nodes each shape fits: a shape that
// fits only a tenth of the cluster's GPUs (large memory, a rare model) weighs ten
// times more, because breaking up one of the few nodes that can take it costs more
// than breaking up one of many. A shape that fits no node, even empty, weighs
// nothing: no placement can help it. A shape bound to some GPU models is weighed
// by the cluster as it is now instead (weighBoundByFreeCapacity).
func (p *Placer) adaptTo(v *View) {
	if !p.policy.weighsScarcity() {
		if p.stale {
			p.workload = p.policy.compile(p.shapes, nil, clusterCapacity{})
			p.stale = false
			p.generation++
		}
		return
	}
	if !p.stale && p.scarcityOf == v.snapshot {
		return
	}
	if p.scarcityOf != v.snapshot {
		p.kinds = kindsOf(v.snapshot)
		clear(p.scarcityByShape)
	}
	p.scarcityOf, p.stale = v.snapshot, false
	scarcity := make([]float64, len(p.shapes))
	for i, s := range p.shapes {
		scarcity[i] = p.scarcityOfShape(s)
	}
	p.weighBoundByFreeCapacity(v, scarcity)
	p.workload = p.policy.compile(p.shapes, scarcity, p.kinds.capacity)
	p.generation++
}

// nodeKinds are a cluster's GPU nodes as they are when empty, alike ones merged, so
// that a shape's fit is checked once per kind.
type nodeKinds struct {
	nodes     []*model.Node
	gpus      []int
	totalGPUs int
	// capacity is what all nodes, with GPUs or without, have per GPU.
	capacity clusterCapacity
}

func kindsOf(s *model.Snapshot) nodeKinds {
	var k nodeKinds
	index := map[string]int{}
	var cpu, mem float64
	// One buffer for every node's key: concatenating a string per GPU copied the
	// growing key each time, 180 ms of a drain's first cycle at 5,000 nodes × 20
	// GPUs (issue 21).
	var key []byte
	for _, n := range s.Nodes {
		cpu += float64(n.Allocatable.MilliCPU)
		mem += float64(n.Allocatable.MemoryBytes)
		if len(n.GPUs) == 0 {
			continue
		}
		k.totalGPUs += len(n.GPUs)
		key = kindKey(key[:0], n)
		if i, ok := index[string(key)]; ok {
			k.gpus[i] += len(n.GPUs)
			continue
		}
		empty := &model.Node{Allocatable: n.Allocatable, GPUsByCountOnly: n.GPUsByCountOnly, GPUs: make([]model.GPU, len(n.GPUs))}
		for i, g := range n.GPUs {
			empty.GPUs[i] = model.GPU{Index: g.Index, Model: g.Model, MemoryBytes: g.MemoryBytes, LiveFreeBytes: model.UnknownBytes, Healthy: true, Partition: g.Partition}
		}
		index[string(key)] = len(k.nodes)
		k.nodes = append(k.nodes, empty)
		k.gpus = append(k.gpus, len(n.GPUs))
	}
	if k.totalGPUs > 0 {
		milli := float64(k.totalGPUs) * model.MilliPerGPU
		k.capacity = clusterCapacity{cpuPerMilli: cpu / milli, memoryPerMilli: mem / milli}
	}
	return k
}

// kindKey appends what makes two nodes alike when empty: allocatable resources,
// how GPUs are known, and each GPU's model, memory and partitioning, in binary
// (each model's length before it, so that no two lists share a key). fmt's
// reflection, then strconv, was 6 then 4 ms of a first cycle at 5,000 nodes.
func kindKey(key []byte, n *model.Node) []byte {
	a := n.Allocatable
	key = binary.AppendVarint(key, a.MilliCPU)
	key = binary.AppendVarint(key, a.MemoryBytes)
	key = binary.AppendVarint(key, a.Pods)
	key = append(key, boolByte(n.GPUsByCountOnly))
	for i := range n.GPUs {
		g := &n.GPUs[i]
		key = binary.AppendUvarint(key, uint64(len(g.Model)))
		key = append(key, g.Model...)
		key = binary.AppendVarint(key, g.MemoryBytes)
		key = append(key, boolByte(g.Partition))
	}
	return key
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// scarcityOfShape is the cluster's GPUs over the GPUs of the nodes a shape fits
// when empty, at most maxScarcity; zero when it fits none; one for CPU-only shapes.
func (p *Placer) scarcityOfShape(s Shape) float64 {
	if s.GPU.Count == 0 || p.kinds.totalGPUs == 0 {
		return 1
	}
	key := keyOfShape(s.Requests, s.GPU)
	if f, ok := p.scarcityByShape[key]; ok {
		return f
	}
	terms := newPodTerms(&model.Pod{Requests: s.Requests, GPU: s.GPU})
	fitGPUs := 0
	for i, n := range p.kinds.nodes {
		if terms.resourceMisfit(n) == fits {
			fitGPUs += p.kinds.gpus[i]
		}
	}
	f := 0.0
	if fitGPUs > 0 {
		f = min(float64(p.kinds.totalGPUs)/float64(fitGPUs), maxScarcity)
	}
	if p.scarcityByShape == nil {
		p.scarcityByShape = map[shapeKey]float64{}
	}
	p.scarcityByShape[key] = f
	return f
}
