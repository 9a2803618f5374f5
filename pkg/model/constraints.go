package model

import (
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// Constraints are what a pod asks of other pods, of topology domains, of host ports
// and of volumes: kube-scheduler's InterPodAffinity, PodTopologySpread, NodePorts,
// VolumeBinding, VolumeZone and NodeVolumeLimits, in the core's terms. A pod that
// asks none of them has nil Constraints and pays nothing for them.
//
// Selectors are apimachinery label selectors and node topology is read from node
// labels, as kube-scheduler reads them; pkg/podspec builds these from the API objects.
type Constraints struct {
	// Affinity and AntiAffinity are the required (requiredDuringScheduling) pod
	// affinity and anti-affinity terms.
	Affinity     []AffinityTerm
	AntiAffinity []AffinityTerm
	// PreferredAffinity and PreferredAntiAffinity are the preferred terms, scored.
	PreferredAffinity     []WeightedAffinityTerm
	PreferredAntiAffinity []WeightedAffinityTerm
	// PreferredNodeAffinity is preferredDuringSchedulingIgnoredDuringExecution of
	// the pod's node affinity, scored.
	PreferredNodeAffinity []corev1.PreferredSchedulingTerm
	// Spread are the topology spread constraints, DoNotSchedule (Hard) and
	// ScheduleAnyway alike.
	Spread []SpreadConstraint
	// NodeFeatures are the node-declared features the pod's spec needs
	// (NodeDeclaredFeatures): the node's DeclaredFeatures must include them all.
	NodeFeatures []string
	// HostPorts are the host ports the pod's containers claim.
	HostPorts []HostPort
	// Volumes are what the pod's PersistentVolumeClaims ask of a node; nil when none.
	Volumes *VolumeNeeds
	// ExclusiveClaims are the pod's ReadWriteOncePod claims ("ns/name"): no other
	// pod may use one (VolumeRestrictions).
	ExclusiveClaims []string
	// Refusals are reasons no node can fix, one per field or object (a field Gantry
	// does not implement, a missing claim): the pod stays pending with them. Each
	// names the field and says what to change.
	Refusals []Refusal
}

// RefusalKind classifies a Refusal.
type RefusalKind string

const (
	// RefusalUnsupported: the pod uses a field Gantry does not implement.
	RefusalUnsupported RefusalKind = "unsupported"
	// RefusalVolume: a claim is missing, lost, bound elsewhere or cannot be bound.
	RefusalVolume RefusalKind = "volume"
	// RefusalInvalid: a field cannot be parsed (a malformed selector).
	RefusalInvalid RefusalKind = "invalid"
)

// Refusal is why a pod cannot be placed on any node whatever happens in the cluster.
type Refusal struct {
	Kind RefusalKind
	// Field is the pod field (or object) at fault, as a path
	// ("spec.volumes[0].persistentVolumeClaim").
	Field string
	// Message says what is wrong and what to change.
	Message string
}

// String is "Field: Message".
func (r Refusal) String() string { return r.Field + ": " + r.Message }

// AffinityTerm is one pod (anti-)affinity term: pods matching Selector in the given
// namespaces, counted per value of the node label TopologyKey.
type AffinityTerm struct {
	Selector labels.Selector
	// Namespaces are the namespaces the term looks at (the pod's own when the term
	// names none and has no namespace selector).
	Namespaces map[string]struct{}
	// NamespaceSelector, when not nil, also admits namespaces whose labels match
	// (Snapshot.NamespaceLabels); labels.Everything() admits all.
	NamespaceSelector labels.Selector
	TopologyKey       string
}

// Matches reports whether the term selects pod p, whose namespace has the labels
// nsLabels (nil when unknown).
func (t *AffinityTerm) Matches(p *Pod, nsLabels labels.Set) bool {
	if _, ok := t.Namespaces[p.Namespace()]; !ok {
		if t.NamespaceSelector == nil || !t.NamespaceSelector.Matches(nsLabels) {
			return false
		}
	}
	return t.Selector.Matches(labels.Set(p.Labels))
}

// WeightedAffinityTerm is a preferred term and its weight (1-100).
type WeightedAffinityTerm struct {
	AffinityTerm
	Weight int32
}

// SpreadConstraint is one topology spread constraint, as kube-scheduler reads it:
// defaults applied (MinDomains 1, node affinity honoured, taints ignored) and
// matchLabelKeys merged into Selector.
type SpreadConstraint struct {
	MaxSkew     int32
	TopologyKey string
	// Hard is whenUnsatisfiable: DoNotSchedule (a filter); false is ScheduleAnyway
	// (a score).
	Hard       bool
	Selector   labels.Selector
	MinDomains int32
	// HonorNodeAffinity counts only nodes that match the pod's node selector and
	// required node affinity (nodeAffinityPolicy: Honor, the default).
	HonorNodeAffinity bool
	// HonorNodeTaints counts only nodes whose NoSchedule and NoExecute taints the pod
	// tolerates (nodeTaintsPolicy: Honor; the default is Ignore).
	HonorNodeTaints bool
}

// HostPort is one host port a container claims. IP is "0.0.0.0" for all
// addresses; Protocol is "TCP" when the pod left it empty.
type HostPort struct {
	IP       string
	Protocol string
	Port     int32
}

// Conflicts reports whether two host ports cannot share a node: same port and
// protocol, and the same address or one of them on all addresses.
func (h HostPort) Conflicts(o HostPort) bool {
	if h.Port != o.Port || h.Protocol != o.Protocol {
		return false
	}
	return h.IP == o.IP || h.IP == allAddresses || o.IP == allAddresses
}

const allAddresses = "0.0.0.0"

// VolumeNeeds are what a pod's volumes ask of a node.
type VolumeNeeds struct {
	// Bound are claims bound to a PersistentVolume: the node must match each
	// volume's node affinity.
	Bound []BoundVolume
	// Delayed are unbound claims of a WaitForFirstConsumer StorageClass: the node
	// must admit a volume for each, an available one or a new one.
	Delayed []DelayedClaim
	// Attach are the CSI volumes the pod attaches, for the driver's per-node limit
	// (Node.CSIAttachLimits). A delayed claim to be provisioned counts as one new
	// volume of its provisioner.
	Attach []CSIVolume
}

// BoundVolume is a claim bound to a PersistentVolume.
type BoundVolume struct {
	Claim  string
	Volume string
	// NodeAffinity is the volume's spec.nodeAffinity.required, nil when any node will
	// do.
	NodeAffinity *corev1.NodeSelector
	// Zones are the volume's zone and region labels (VolumeZone): on a node with any
	// zone or region label, the node's value for each key must be one of these.
	Zones []ZoneLabel
}

// ZoneLabel is a zone or region label of a volume, with its values
// ("us-east-1a__us-east-1b" is two).
type ZoneLabel struct {
	Key    string
	Values []string
}

// DelayedClaim is an unbound claim whose StorageClass binds on first consumer.
type DelayedClaim struct {
	Claim        string
	StorageClass string
	// Available are the unbound PersistentVolumes that could bind the claim (class,
	// size and access modes fit), each with the nodes its affinity admits.
	Available []BoundVolume
	// Provisioner is the class's provisioner, empty when the class cannot provision
	// (kubernetes.io/no-provisioner): then only Available volumes can serve.
	Provisioner string
	// AllowedTopologies is the class's allowedTopologies; empty admits every node.
	AllowedTopologies []corev1.TopologySelectorTerm
	// SelectedNode is the claim's volume.kubernetes.io/selected-node annotation: a
	// volume is being provisioned for that node, so no other node can provision
	// one (kube-scheduler's VolumeBinding reads it the same way). Empty when unset.
	SelectedNode string
	// DriverTopologyKeys, when the provisioner is a CSI driver with topology, are the
	// node label keys the driver reports (CSINode drivers[].topologyKeys): a node
	// that lacks one cannot host a new volume.
	DriverTopologyKeys []string
}

// CSIVolume is one attached CSI volume: Driver's volume Handle.
type CSIVolume struct {
	Driver string
	Handle string
}

// Namespace is the namespace part of the pod's ID ("ns/name").
func (p *Pod) Namespace() string {
	ns, _, _ := strings.Cut(string(p.ID), "/")
	return ns
}

// HasAntiAffinity reports whether the pod has required anti-affinity terms, which
// every other pod placed near it must respect.
func (p *Pod) HasAntiAffinity() bool {
	return p.Constraints != nil && len(p.Constraints.AntiAffinity) > 0
}

// HasAffinityTerms reports whether the pod has terms that score the pods placed
// near it: required affinity, preferred affinity or anti-affinity. (Required
// anti-affinity filters; see HasAntiAffinity.)
func (p *Pod) HasAffinityTerms() bool {
	c := p.Constraints
	return c != nil && len(c.Affinity)+len(c.PreferredAffinity)+len(c.PreferredAntiAffinity) > 0
}
