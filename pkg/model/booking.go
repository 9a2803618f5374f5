package model

// Book adds pod p, holding the given GPU bindings, to n in place: its requests (at
// least one pod slot) and its GPU memory. Callers that need copy-on-write clone n
// first (pkg/placement's View does).
func (n *Node) Book(p *Pod, gpus []GPUBinding) { n.book(p, gpus, 1) }

// Unbook removes what Book added.
func (n *Node) Unbook(p *Pod, gpus []GPUBinding) { n.book(p, gpus, -1) }

// BookedRequests is what a pod books on its node: its requests, and one pod slot
// whether or not Requests.Pods was filled in.
func (p *Pod) BookedRequests() Resources {
	r := p.Requests
	if r.Pods == 0 {
		r.Pods = 1
	}
	return r
}

func (n *Node) book(p *Pod, gpus []GPUBinding, sign int64) {
	r := p.BookedRequests()
	if sign > 0 {
		n.Requested = n.Requested.Add(r)
		n.addPod(p)
	} else {
		n.Requested = n.Requested.Sub(r)
		n.removePod(p)
	}
	for _, b := range gpus {
		g := n.GPUByIndex(b.Index)
		if g == nil {
			continue
		}
		bytes := b.MemoryBytes
		if b.Whole && bytes == 0 {
			bytes = g.MemoryBytes
		}
		g.AllocatedBytes += sign * bytes
		if g.AllocatedBytes < 0 {
			g.AllocatedBytes = 0
		}
		switch {
		case b.Whole:
			g.Exclusive = sign > 0
		case sign > 0:
			g.Sharers++
		case g.Sharers > 0:
			g.Sharers--
		}
		// Until the node agent measures again, the booking is the best estimate of
		// what the pod will use.
		if g.LiveFreeBytes != UnknownBytes {
			g.LiveFreeBytes -= sign * bytes
			g.LiveFreeBytes = max(0, min(g.MemoryBytes, g.LiveFreeBytes))
		}
	}
}

// GPUByIndex finds a GPU by its device index, or nil. GPUs are normally stored in
// index order, so the position is tried first.
func (n *Node) GPUByIndex(index int) *GPU {
	if index >= 0 && index < len(n.GPUs) && n.GPUs[index].Index == index {
		return &n.GPUs[index]
	}
	for i := range n.GPUs {
		if n.GPUs[i].Index == index {
			return &n.GPUs[i]
		}
	}
	return nil
}

// addPod records p among n's pods. The slice is copied, never appended in place,
// because clones share it.
func (n *Node) addPod(p *Pod) {
	pods := make([]*Pod, len(n.Pods), len(n.Pods)+1)
	copy(pods, n.Pods)
	n.Pods = append(pods, p)
	if p.HasAntiAffinity() {
		n.AntiAffinityPods++
	}
	if p.HasAffinityTerms() {
		n.AffinityPods++
	}
}

// removePod drops p (by ID) from n's pods.
func (n *Node) removePod(p *Pod) {
	for i, q := range n.Pods {
		if q.ID != p.ID {
			continue
		}
		pods := make([]*Pod, 0, len(n.Pods)-1)
		pods = append(pods, n.Pods[:i]...)
		n.Pods = append(pods, n.Pods[i+1:]...)
		if q.HasAntiAffinity() {
			n.AntiAffinityPods--
		}
		if q.HasAffinityTerms() {
			n.AffinityPods--
		}
		return
	}
}
