package podspec

import (
	storagev1 "k8s.io/api/storage/v1"
)

// CSIAttachLimits reads a node's per-driver attach limits from its CSINode
// (spec.drivers[].allocatable.count), for model.Node.CSIAttachLimits; nil when no
// driver states one.
func CSIAttachLimits(csiNode *storagev1.CSINode) map[string]int {
	if csiNode == nil {
		return nil
	}
	var out map[string]int
	for _, d := range csiNode.Spec.Drivers {
		if d.Allocatable == nil || d.Allocatable.Count == nil {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		out[d.Name] = int(*d.Allocatable.Count)
	}
	return out
}

// DriverTopologyKeys collects, over all CSINodes, the topology keys each driver
// reports, for Lookup.DriverTopologyKeys.
func DriverTopologyKeys(csiNodes []*storagev1.CSINode) map[string][]string {
	out := map[string][]string{}
	for _, n := range csiNodes {
		for _, d := range n.Spec.Drivers {
			for _, k := range d.TopologyKeys {
				if !contains(out[d.Name], k) {
					out[d.Name] = append(out[d.Name], k)
				}
			}
		}
	}
	return out
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
