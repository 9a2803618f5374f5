package preempt

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// noCandidatesMessage says why no running gang may be evicted for p, by reason, most
// common first: "no running gang may be evicted for gang team-a/llm (priority 125,
// queue team-a): 2 not preemptible, 1 within the protection window (600 s)".
func noCandidatesMessage(req Request, p preemptor, refused refusals) string {
	head := "no running gang may be evicted for " + p.describe()
	if len(refused) == 0 {
		return head + ": no other gang is running"
	}
	type count struct {
		why   string
		gangs int
	}
	var counts []count
	for why, n := range refused {
		if why == refusedProtected {
			why = fmt.Sprintf("%s (%d s)", why, req.MinRuntimeSeconds)
		}
		counts = append(counts, count{why, n})
	}
	slices.SortFunc(counts, func(a, b count) int { return cmp.Or(cmp.Compare(b.gangs, a.gangs), cmp.Compare(a.why, b.why)) })
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%d %s", c.gangs, c.why)
	}
	return head + ": of the running gangs, " + strings.Join(parts, ", ")
}

// reason is the Event line: who, why, what is freed. For example "gang team-a/llm
// (priority 125) preempts gang team-a/train (priority 50): frees 1 GPU (24 GiB) on
// node-a".
func (s *search) reason(chosen []*unit, r *Result) string {
	var preempted, reclaimed []*unit
	var victimQueues []string
	for _, u := range chosen {
		if u.kind == KindReclaim {
			reclaimed = append(reclaimed, u)
			if !slices.Contains(victimQueues, u.gang.Queue) {
				victimQueues = append(victimQueues, u.gang.Queue)
			}
		} else {
			preempted = append(preempted, u)
		}
	}
	who := fmt.Sprintf("gang %s (%s)", s.p.gang, priorityWords(s.p.class, s.p.priority))
	var actions []string
	if len(preempted) > 0 {
		actions = append(actions, "preempts "+describeUnits(preempted))
	}
	if len(reclaimed) > 0 {
		// Both rules judge a victim queue alike for every gang of it; the first
		// reclaimed unit names the rule.
		byQuota := reclaimed[0].byQuota
		if rs := s.rules.gpuShare(s.p.queue); rs != nil {
			standing := fmt.Sprintf("below its fair share of %s", formatGPUs(rs.FairShare))
			if byQuota {
				standing = fmt.Sprintf("within its quota of %s", formatGPUs(deserved(rs)))
			}
			who = fmt.Sprintf("gang %s (%s; queue %s holds %s GPUs, %s)",
				s.p.gang, priorityWords(s.p.class, s.p.priority), s.p.queue, formatGPUs(rs.Allocated), standing)
		}
		slices.Sort(victimQueues)
		var above []string
		for _, q := range victimQueues {
			rs := s.rules.gpuShare(q)
			switch {
			case rs == nil:
			case byQuota:
				above = append(above, fmt.Sprintf("queue %s (%s GPUs, above its quota of %s)", q, formatGPUs(rs.Allocated), formatGPUs(rs.Quota)))
			default:
				above = append(above, fmt.Sprintf("queue %s (%s GPUs, fair share %s)", q, formatGPUs(rs.Allocated), formatGPUs(rs.FairShare)))
			}
		}
		actions = append(actions, fmt.Sprintf("reclaims %s from %s", describeUnits(reclaimed), strings.Join(above, ", ")))
	}
	return fmt.Sprintf("%s %s: frees %s", who, strings.Join(actions, " and "), s.describeFreed(r.Victims))
}

// describeUnits names victims: "gang a (priority 50), 2 elastic members of gang b
// (priority 100)", at most three, then "and 4 more".
func describeUnits(units []*unit) string {
	var names []string
	elastic := map[model.GangID]int{}
	var elasticOrder []*unit
	for _, u := range units {
		if u.elastic {
			if elastic[u.gang.ID] == 0 {
				elasticOrder = append(elasticOrder, u)
			}
			elastic[u.gang.ID]++
			continue
		}
		names = append(names, fmt.Sprintf("gang %s (%s)", u.gang.ID, priorityWords(u.gang.PriorityClassName, u.priority)))
	}
	for _, u := range elasticOrder {
		n := elastic[u.gang.ID]
		word := "elastic member"
		if n > 1 {
			word = "elastic members"
		}
		names = append(names, fmt.Sprintf("%d %s of gang %s (%s)", n, word, u.gang.ID, priorityWords(u.gang.PriorityClassName, u.priority)))
	}
	const shown = 3
	if len(names) > shown {
		return fmt.Sprintf("%s and %d more", strings.Join(names[:shown], ", "), len(names)-shown)
	}
	return strings.Join(names, ", ")
}

// describeFreed says what evicting the pods frees: "1 GPU (24 GiB) on node-a",
// "20 GiB of shared GPU memory on node-b".
func (s *search) describeFreed(pods []*model.Pod) string {
	wholeGPUs := 0
	var sharedBytes, totalBytes int64
	var nodes []string
	for _, pod := range pods {
		node := s.req.Snapshot.Node(pod.Node)
		for _, b := range pod.GPUs {
			bytes := bindingBytes(node, b)
			totalBytes += bytes
			if b.Whole {
				wholeGPUs++
			} else {
				sharedBytes += bytes
			}
		}
		if !slices.Contains(nodes, pod.Node) {
			nodes = append(nodes, pod.Node)
		}
	}
	slices.Sort(nodes)
	var what string
	switch {
	case wholeGPUs > 0 && sharedBytes > 0:
		what = fmt.Sprintf("%s and %s of shared GPU memory (%s)", plural(wholeGPUs, "GPU"), placement.FormatBytes(sharedBytes), placement.FormatBytes(totalBytes))
	case wholeGPUs > 0:
		what = fmt.Sprintf("%s (%s)", plural(wholeGPUs, "GPU"), placement.FormatBytes(totalBytes))
	case sharedBytes > 0:
		what = placement.FormatBytes(sharedBytes) + " of shared GPU memory"
	default:
		what = "CPU and memory only"
	}
	return what + " on " + strings.Join(nodes, ", ")
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}

// formatGPUs shows a GPU amount without binary noise: "2", "1.5", "0.25".
func formatGPUs(v float64) string {
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 3, 64), 64)
	return strconv.FormatFloat(rounded, 'f', -1, 64)
}

// priorityWords names a priority for people: "inference, priority 125", or
// "priority 125" when no class names it.
func priorityWords(class string, value int32) string {
	if class == "" {
		return fmt.Sprintf("priority %d", value)
	}
	return fmt.Sprintf("%s, priority %d", class, value)
}
