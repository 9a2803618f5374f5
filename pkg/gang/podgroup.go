package gang

import (
	"fmt"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
)

// buildPodGroup sizes a gang from its PodGroup: spec.minMember, which the sub-groups'
// minima fill first.
func buildPodGroup(g *Gang, members []Member, minimum map[*Member]bool, pg *schedulingv1alpha1.PodGroup) sources {
	g.Owner = "PodGroup/" + pg.Name
	subTotal := 0
	bySubGroup := map[string][]*Member{}
	for i := range members {
		bySubGroup[members[i].Group] = append(bySubGroup[members[i].Group], &members[i])
	}
	subShort := 0
	var short []string
	for _, sg := range pg.Spec.SubGroups {
		// The CRD refuses a negative minMember; a negative one from elsewhere (an
		// older CRD, a test) would take every member of the sub-group and lower the
		// gang's total.
		n := max(int(sg.MinMember), 0)
		g.SubGroups = append(g.SubGroups, SubGroup{Name: sg.Name, MinMember: n})
		subTotal += n
		if missing := pick(bySubGroup[sg.Name], n, minimum); missing > 0 {
			subShort += missing
			short = append(short, fmt.Sprintf("%d of %d pods of sub-group %s", missing, n, sg.Name))
		}
	}
	g.MinMember = max(int(pg.Spec.MinMember), subTotal, 1)
	if subTotal > int(pg.Spec.MinMember) {
		g.Warnings = append(g.Warnings, fmt.Sprintf(
			"PodGroup %s/%s: the sub-groups need %d pods together, more than minMember %d; using %d: raise spec.minMember to at least %d",
			pg.Namespace, pg.Name, subTotal, pg.Spec.MinMember, subTotal, subTotal))
	}
	// The rest of the minimum from any member, in standing order.
	rest := pick(pointers(members), g.MinMember-len(minimum), minimum)
	g.MissingPods = max(rest, subShort)
	if rest < subShort {
		g.Missing = "waiting for " + strings.Join(short, " and ") + " to be created"
	}
	return sources{
		owners:            []metav1.Object{pg},
		queue:             pg.Spec.Queue,
		priorityClassName: pg.Spec.PriorityClassName,
		preemptible:       pg.Spec.Preemptible,
	}
}

// buildAnnotated sizes an ad-hoc gang (gantry.dev/pod-group without a PodGroup) from
// its members' gantry.dev/min-member annotations: the largest wins; with none, every
// member that exists.
func buildAnnotated(g *Gang, members []Member, minimum map[*Member]bool) {
	g.Owner = ""
	want := 0
	for _, m := range members {
		raw, ok := m.Pod.Annotations[names.AnnotationMinMember]
		if !ok {
			continue
		}
		n, err := strconv.Atoi(strings.TrimSpace(raw))
		if err != nil || n < 1 {
			g.Warnings = append(g.Warnings, fmt.Sprintf(
				"pod %s: %s is %q, not a whole number of at least 1: set it to how many pods must start together",
				m.ID, names.AnnotationMinMember, raw))
			continue
		}
		want = max(want, n)
	}
	if want == 0 {
		for _, m := range members {
			if counts(m) {
				want++
			}
		}
	}
	g.MinMember = max(want, 1)
	g.MissingPods = pick(pointers(members), g.MinMember, minimum)
}
