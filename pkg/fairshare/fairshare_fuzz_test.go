package fairshare

import (
	"encoding/binary"
	"fmt"
	"math"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// fuzzTree decodes a queue tree from bytes: each queue takes a parent byte (any queue,
// itself, a missing one, or none), a priority byte and three float64s (quota, limit,
// weight) for gpu. Cycles, dangling parents, NaN and huge values all come out of it.
func fuzzTree(data []byte) (map[string]*model.Queue, map[string]Usage) {
	queues := map[string]*model.Queue{}
	usage := map[string]Usage{}
	const per = 2 + 3*8 + 8
	n := min(len(data)/per, 12)
	for i := 0; i < n; i++ {
		b := data[i*per : (i+1)*per]
		name := fmt.Sprintf("q%d", i)
		parent := ""
		switch p := int(b[0]) % (n + 2); {
		case p < n:
			parent = fmt.Sprintf("q%d", p)
		case p == n:
			parent = "missing"
		}
		f := func(k int) float64 { return math.Float64frombits(binary.LittleEndian.Uint64(b[2+8*k:])) }
		queues[name] = &model.Queue{Name: name, Parent: parent, Priority: int32(int8(b[1])),
			Resources: map[model.ResourceName]model.QueueResource{model.ResourceGPU: {Quota: f(0), Limit: f(1), OverQuotaWeight: f(2)}}}
		u := f(3)
		usage[name] = Usage{Allocated: Amounts{model.ResourceGPU: u}, Requested: Amounts{model.ResourceGPU: 2 * u}}
	}
	return queues, usage
}

func finite(v ...float64) bool {
	for _, x := range v {
		if math.IsNaN(x) || math.IsInf(x, 0) {
			return false
		}
	}
	return true
}

func encodeTree(qs ...[5]float64) []byte {
	var out []byte
	for _, q := range qs {
		out = append(out, byte(q[0]), 100)
		for _, v := range q[1:] {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	}
	return out
}

// FuzzQueueTree checks Validate, Warnings, Compute and the queries a cycle makes on any
// tree: no panic, no hang; and on a tree Validate accepts, with finite amounts, every
// fair share is finite, not negative, and the roots' shares fit the capacity.
func FuzzQueueTree(f *testing.F) {
	// parent index (≥ n for none/missing), quota, limit, weight, usage.
	f.Add(encodeTree([5]float64{9, 4, 8, 1, 2}, [5]float64{0, 2, -1, 1, 3}, [5]float64{0, 1, 2, 2, 1}), 8.0)
	f.Add(encodeTree([5]float64{1, 1, 1, 1, 1}, [5]float64{0, 1, 1, 1, 1}), 4.0)
	f.Add(encodeTree([5]float64{9, math.NaN(), -1, 1, 1}, [5]float64{0, 1e308, -1, 1e308, 1e308}, [5]float64{0, 1e308, -1, 1, 1}), 1e308)
	f.Fuzz(func(t *testing.T, data []byte, capacity float64) {
		queues, usage := fuzzTree(data)
		verr := Validate(queues)
		_ = Warnings(queues)
		for name := range queues {
			_ = ValidatePodQueue(queues, name)
		}
		shares, err := Compute(queues, Amounts{model.ResourceGPU: capacity}, usage)
		if shares == nil {
			t.Fatalf("Compute returned no Shares (error %v)", err)
		}
		var leaves []string
		for name := range queues {
			if qs := shares.Queue(name); qs != nil && qs.IsLeaf() {
				leaves = append(leaves, name)
				_ = shares.WouldExceedLimit(name, Amounts{model.ResourceGPU: 1})
				_ = shares.WouldExceedQuota(name, Amounts{model.ResourceGPU: 1})
				_ = shares.AtLimit(name)
				_ = shares.DominantShare(name)
				shares.Allocate(name, Amounts{model.ResourceGPU: 1})
				shares.Release(name, Amounts{model.ResourceGPU: 1})
			}
		}
		_ = shares.Order(leaves)
		_, _ = shares.Next(leaves)

		if verr != nil || !finite(capacity) || capacity < 0 {
			return
		}
		for _, q := range queues {
			b := q.Resources[model.ResourceGPU]
			u := usage[q.Name].Allocated[model.ResourceGPU]
			// Amounts a Queue object can carry: JSON has no NaN or infinity, and usage is
			// what pods hold.
			if !finite(b.Quota, b.Limit, b.OverQuotaWeight, u) || u < 0 || math.Abs(b.Quota) > 1e12 || math.Abs(b.Limit) > 1e12 ||
				b.OverQuotaWeight > 1e12 || u > 1e12 {
				return
			}
		}
		rootSum := 0.0
		for name := range queues {
			fs := shares.FairShare(name, model.ResourceGPU)
			if !finite(fs) || fs < -1e-9 {
				t.Fatalf("queue %s: fair share %v on a valid tree %v with capacity %v", name, fs, describeTree(queues), capacity)
			}
			if queues[name].Parent == "" {
				rootSum += fs
			}
		}
		if rootSum > capacity*(1+1e-9)+1e-6 {
			t.Fatalf("roots' fair shares add up to %v, capacity %v; tree %v", rootSum, capacity, describeTree(queues))
		}
	})
}

func describeTree(queues map[string]*model.Queue) string {
	out := ""
	for _, name := range sortedNames(queues) {
		q := queues[name]
		out += fmt.Sprintf("[%s parent=%q %+v] ", name, q.Parent, q.Resources[model.ResourceGPU])
	}
	return out
}
