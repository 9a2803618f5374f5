package scheduler

import (
	"fmt"

	"github.com/google/btree"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

// A cycle tries the pending gangs of each queue in the order of before. Sorting every
// pending gang at the start of every cycle costs a drain of 100,000 pods most of each
// cycle (docs/scheduler.md, Cost model), though between two cycles only the gangs
// that were placed, arrived or changed move. Order keeps that order across cycles:
// whoever keeps the snapshot (pkg/kube/cache) tells it which gangs changed
// (Refresh), and ScheduleOrdered walks each queue from its head, reading only the
// gangs it reaches. A cycle never changes the Order it is given.

// Order is the pending gangs of a snapshot, per queue, in the order a cycle tries
// them. The zero value is not usable: NewOrder.
type Order struct {
	queues map[string]*queueOrder
	keys   map[model.GangID]orderKey
	pods   int
	// ch are the queues' charges and the cluster's capacity, kept (charges.go); nil
	// in an Order built for one cycle (OrderOf), which charges from scratch.
	ch *charges
	// touched are the gangs refreshed since Settle, where the placer's workload
	// learner looks for new pods; nil in an Order built for one cycle.
	touched map[model.GangID]struct{}
}

type queueOrder struct {
	tree *btree.BTreeG[orderKey]
	pods int
}

// orderKey is what before compares, with the gang's queue (the one it is charged
// to) and its pending pods.
type orderKey struct {
	id              model.GangID
	queue           string
	nominated       bool
	priority        int32
	nominationOrder int64
	createdAt       int64
	pods            int
}

// less is before on keys: nominated preemptors first, then higher priority, then
// the one nominated first, then first come, then by name.
func (a orderKey) less(b orderKey) bool {
	if a.nominated != b.nominated {
		return a.nominated
	}
	if a.priority != b.priority {
		return a.priority > b.priority
	}
	if a.nominated && a.nominationOrder != b.nominationOrder {
		return a.nominationOrder < b.nominationOrder
	}
	if a.createdAt != b.createdAt {
		return a.createdAt < b.createdAt
	}
	return a.id < b.id
}

func keyLess(a, b orderKey) bool { return a.less(b) }

// NewOrder returns an empty Order that also keeps the queues' charges: its keeper
// refreshes every gang that changes (Refresh), pending or not, and every node
// (RefreshNode).
func NewOrder() *Order {
	o := newOrder()
	o.ch = newCharges()
	o.touched = map[model.GangID]struct{}{}
	return o
}

// Settle tells the Order that a cycle has seen the gangs refreshed so far: the next
// cycle's workload learner looks at the gangs refreshed after it only.
//
// A map that held many gangs (the first cycle after a restart, a drain) is replaced
// rather than cleared: a cleared Go map keeps its capacity, and ranging over it
// costs that capacity however few gangs it holds, so every cycle after a start on
// 100,000 pods paid for visiting 100,000 empty slots to learn from one new pod.
func (o *Order) Settle() {
	switch {
	case o.touched == nil:
	case len(o.touched) > settleReuse:
		o.touched = make(map[model.GangID]struct{})
	default:
		clear(o.touched)
	}
}

// settleReuse is the most gangs whose touched map Settle clears for reuse.
const settleReuse = 64

// observed is the snapshot the placer's workload learner is shown: with an Order
// that keeps track, snap with only the gangs refreshed since Settle as pending,
// which is where new pods appear, rather than every pending gang.
func (o *Order) observed(snap *model.Snapshot) *model.Snapshot {
	if o.touched == nil {
		return snap
	}
	v := *snap
	v.PendingGangs = o.touched
	return &v
}

func newOrder() *Order {
	return &Order{queues: map[string]*queueOrder{}, keys: map[model.GangID]orderKey{}}
}

// OrderOf builds the Order of snap's pending gangs from scratch, for one cycle: it
// keeps no charges, and a cycle given it charges every pod (Shares).
func OrderOf(snap *model.Snapshot) *Order {
	o := newOrder()
	if snap.PendingGangs != nil {
		for id := range snap.PendingGangs {
			o.Refresh(snap, id)
		}
		return o
	}
	for id := range snap.Gangs {
		o.Refresh(snap, id)
	}
	return o
}

// Refresh re-reads gang g from snap after it, or one of its pods, changed (added,
// removed, bound, nominated, re-prioritised): it takes its place in its queue, or
// leaves the Order when it has no pending member. It costs the gang's members and a
// logarithm of the gangs pending.
func (o *Order) Refresh(snap *model.Snapshot, g model.GangID) {
	if o.ch != nil {
		o.ch.refreshGang(snap, g)
	}
	if o.touched != nil {
		o.touched[g] = struct{}{}
	}
	key, ok := keyOf(snap, g)
	old, had := o.keys[g]
	if had && ok && old == key {
		return
	}
	if had {
		q := o.queues[old.queue]
		q.tree.Delete(old)
		q.pods -= old.pods
		o.pods -= old.pods
		if q.tree.Len() == 0 {
			delete(o.queues, old.queue)
		}
		delete(o.keys, g)
	}
	if !ok {
		return
	}
	q := o.queues[key.queue]
	if q == nil {
		q = &queueOrder{tree: btree.NewG(32, keyLess)}
		o.queues[key.queue] = q
	}
	q.tree.ReplaceOrInsert(key)
	q.pods += key.pods
	o.pods += key.pods
	o.keys[g] = key
}

// RefreshNode counts the node's capacity again after it changed, was added or was
// removed. The gangs of the pods bound to it are to be refreshed too: what a bound
// pod charges its queue depends on its node's GPUs.
func (o *Order) RefreshNode(snap *model.Snapshot, name string) {
	if o.ch != nil {
		o.ch.refreshNode(snap, name)
	}
}

// Shares divides the cluster between snap's queues as Scheduler.Shares does: from
// the kept charges when the Order keeps them, from scratch otherwise.
func (o *Order) Shares(snap *model.Snapshot) (*fairshare.Shares, error) {
	if o.ch == nil {
		return (&Scheduler{}).Shares(snap)
	}
	return o.ch.shares(snap)
}

// Len is the number of pending gangs.
func (o *Order) Len() int { return len(o.keys) }

// Pods is the number of pending pods.
func (o *Order) Pods() int { return o.pods }

// keyOf is g's place in the order, as gangWork sees it; false when g has no pending
// member (or is gone).
func keyOf(snap *model.Snapshot, g model.GangID) (orderKey, bool) {
	gang := snap.Gangs[g]
	if gang == nil {
		return orderKey{}, false
	}
	k := orderKey{id: g, queue: snap.QueueOf(gang.Queue), priority: gang.Priority, createdAt: gang.CreatedAt}
	for _, id := range gang.Members {
		p := snap.Pods[id]
		if p == nil || p.Bound() {
			continue
		}
		k.pods++
		if p.NominatedNode == "" {
			continue
		}
		if !k.nominated || p.NominationOrder < k.nominationOrder {
			k.nominationOrder = p.NominationOrder
		}
		k.nominated = true
	}
	return k, k.pods > 0
}

// workKey is w's key, for merging gangs put back into a queue with the Order.
func workKey(w *work) orderKey {
	return orderKey{id: w.gang.ID, queue: w.gang.Queue, nominated: w.nominated, priority: w.gang.Priority,
		nominationOrder: w.nominationOrder, createdAt: w.gang.CreatedAt}
}

// cursor walks one queue of an Order in order, a chunk at a time, without changing
// it.
type cursor struct {
	q     *queueOrder
	buf   []orderKey
	last  orderKey
	begun bool
	done  bool
	// front are gangs put back into the queue in this cycle (nominations
	// withdrawn), in the order of before; nextWork merges them with the rest.
	front []*work
}

const cursorChunk = 64

// next returns the next key of the queue, or false at its end.
func (c *cursor) next() (orderKey, bool) {
	if len(c.buf) == 0 && !c.done {
		c.fill()
	}
	if len(c.buf) == 0 {
		return orderKey{}, false
	}
	k := c.buf[0]
	c.buf = c.buf[1:]
	return k, true
}

func (c *cursor) fill() {
	if c.q == nil {
		c.done = true
		return
	}
	// Sized for what the queue holds: under steady arrivals a queue holds a gang
	// or two, and a whole chunk (4 KB) a queue a cycle was 3.5 % of
	// gantry-scheduler's allocations at 100 pods/s (session 17).
	buf := make([]orderKey, 0, min(cursorChunk, c.q.tree.Len()))
	visit := func(k orderKey) bool {
		if c.begun && !c.last.less(k) {
			return true // the last key read, seen again
		}
		buf = append(buf, k)
		return len(buf) < cursorChunk
	}
	if c.begun {
		c.q.tree.AscendGreaterOrEqual(c.last, visit)
	} else {
		c.q.tree.Ascend(visit)
	}
	if len(buf) < cursorChunk {
		c.done = true
	}
	if len(buf) > 0 {
		c.last, c.begun = buf[len(buf)-1], true
	}
	c.buf = buf
}

// peek reports the next key without taking it.
func (c *cursor) peek() (orderKey, bool) {
	if len(c.buf) == 0 && !c.done {
		c.fill()
	}
	if len(c.buf) == 0 {
		return orderKey{}, false
	}
	return c.buf[0], true
}

// Diff describes the first difference between o and p (the same gangs, keyed alike,
// in each queue), or "" when they agree: a check that a maintained Order has kept up
// with its snapshot (Diff(OrderOf(snap))).
func (o *Order) Diff(p *Order) string {
	if o.pods != p.pods || len(o.keys) != len(p.keys) {
		return fmt.Sprintf("%d gangs with %d pending pods, against %d with %d", len(o.keys), o.pods, len(p.keys), p.pods)
	}
	for g, k := range o.keys {
		if pk, ok := p.keys[g]; !ok || pk != k {
			return fmt.Sprintf("gang %s: %+v, against %+v", g, k, pk)
		}
	}
	for name, q := range o.queues {
		pq := p.queues[name]
		if pq == nil || pq.pods != q.pods || pq.tree.Len() != q.tree.Len() {
			return fmt.Sprintf("queue %q differs", name)
		}
	}
	return ""
}
