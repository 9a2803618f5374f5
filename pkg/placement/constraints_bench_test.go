package placement

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gantry-dev/gantry/pkg/model"
)

// labelCluster is benchCluster with hostname, zone (10) and rack (100) labels.
func labelCluster(n int) *model.Snapshot {
	s := benchCluster(n)
	for i, node := range s.Nodes {
		node.Labels = map[string]string{
			corev1.LabelHostname:     node.Name,
			corev1.LabelTopologyZone: fmt.Sprintf("zone-%d", i%10),
			"rack":                   fmt.Sprintf("rack-%d", i%100),
		}
	}
	return s
}

func selfTerm(app, key string) model.AffinityTerm {
	return model.AffinityTerm{Selector: labels.SelectorFromSet(labels.Set{"app": app}), Namespaces: map[string]struct{}{"ns": {}}, TopologyKey: key}
}

// constrainedPods are GPU pods with pod anti-affinity (one per node), preferred
// affinity by rack, DoNotSchedule spread by zone and ScheduleAnyway spread by rack.
func constrainedPods() []*model.Pod {
	anti := gpuPod("anti", 1, 4000, 16<<30)
	anti.Labels = map[string]string{"app": "anti"}
	anti.Constraints = &model.Constraints{AntiAffinity: []model.AffinityTerm{selfTerm("anti", corev1.LabelHostname)}}
	pref := gpuPod("pref", 1, 4000, 16<<30)
	pref.Labels = map[string]string{"app": "pref"}
	pref.Constraints = &model.Constraints{PreferredAffinity: []model.WeightedAffinityTerm{{AffinityTerm: selfTerm("pref", "rack"), Weight: 50}}}
	spread := gpuPod("spread", 1, 4000, 16<<30)
	spread.Labels = map[string]string{"app": "spread"}
	sel := labels.SelectorFromSet(labels.Set{"app": "spread"})
	spread.Constraints = &model.Constraints{Spread: []model.SpreadConstraint{
		{MaxSkew: 1, TopologyKey: corev1.LabelTopologyZone, Hard: true, Selector: sel, MinDomains: 1, HonorNodeAffinity: true},
		{MaxSkew: 1, TopologyKey: "rack", Selector: sel, MinDomains: 1, HonorNodeAffinity: true},
	}}
	return []*model.Pod{anti, pref, spread}
}

func benchPlaceOn(b *testing.B, s *model.Snapshot, pods []*model.Pod) {
	p, err := NewOnline("")
	if err != nil {
		b.Fatal(err)
	}
	v := NewView(s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// A fresh copy per placement: the view records each placed pod on its node.
		pod := *pods[i%len(pods)]
		pod.ID = model.PodID(fmt.Sprintf("%s-%d", pod.ID, i))
		p.Arrive(&pod)
		pl, u := p.PlacePod(v, &pod)
		if u != nil {
			b.StopTimer()
			v = NewView(s)
			b.StartTimer()
			continue
		}
		v.Assign(&pod, pl)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "placements/s")
}

// BenchmarkPlacePodConstrained5000x8 places only constrained pods.
func BenchmarkPlacePodConstrained5000x8(b *testing.B) {
	benchPlaceOn(b, labelCluster(5000), constrainedPods())
}

// BenchmarkPlacePodAmidConstraints5000x8 places plain pods in a cluster where one
// pod in four has pod affinity or spread constraints, as the goal states.
func BenchmarkPlacePodAmidConstraints5000x8(b *testing.B) {
	plain := gpuPod("p", 1, 4000, 16<<30)
	pods := append(constrainedPods(), plain, plain, plain, plain, plain, plain, plain, plain, plain)
	benchPlaceOn(b, labelCluster(5000), pods)
}
