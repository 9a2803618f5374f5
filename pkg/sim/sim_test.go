package sim

import (
	"context"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFile writes a test file into dir and returns its path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// tinyCluster is two T4 nodes, 4 + 2 GPUs, columns in an unusual order with one the
// replay does not know.
const tinyNodes = `model,gpu,sn,memory_mib,cpu_milli,rack
T4,4,node-a,131072,32000,r1
T4,2,node-b,65536,16000,r2
`

func TestLoadByHeaderName(t *testing.T) {
	dir := t.TempDir()
	nodes, err := LoadNodes(writeFile(t, dir, "nodes.csv", tinyNodes))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 2 || nodes[0].Name != "node-a" || len(nodes[0].GPUs) != 4 || nodes[0].Allocatable.MilliCPU != 32000 ||
		nodes[0].Allocatable.MemoryBytes != 131072<<20 || nodes[1].GPUs[1].Model != "T4" {
		t.Fatalf("nodes = %+v", nodes)
	}
	// No gpu_spec, qos or time columns; a float-formatted integer.
	tasks, err := LoadTasks(writeFile(t, dir, "pods.csv", "num_gpu,name,cpu_milli,memory_mib,gpu_milli\n1,p0,4000,1024,1000.0\n1,p1,2000,512,250\n0,p2,1000,256,0\n2,p3,8000,2048,\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := []Task{
		{Name: "p0", MilliCPU: 4000, MemoryBytes: 1 << 30, NumGPU: 1, GPUMilli: 1000},
		{Name: "p1", MilliCPU: 2000, MemoryBytes: 512 << 20, NumGPU: 1, GPUMilli: 250},
		{Name: "p2", MilliCPU: 1000, MemoryBytes: 256 << 20},
		{Name: "p3", MilliCPU: 8000, MemoryBytes: 2 << 30, NumGPU: 2, GPUMilli: 1000},
	}
	for i := range want {
		if tasks[i].Name != want[i].Name || tasks[i].MilliCPU != want[i].MilliCPU || tasks[i].MemoryBytes != want[i].MemoryBytes ||
			tasks[i].NumGPU != want[i].NumGPU || tasks[i].GPUMilli != want[i].GPUMilli || tasks[i].Models != nil {
			t.Errorf("task %d = %+v, want %+v", i, tasks[i], want[i])
		}
	}
	if p := tasks[1].Pod(); p.GPU.FractionMilli != 250 || p.GPU.Count != 1 || !p.GPU.Shared() {
		t.Errorf("share task as a pod = %+v", p.GPU)
	}
	if p := tasks[3].Pod(); !p.GPU.Whole() || p.GPU.Count != 2 {
		t.Errorf("2-GPU task as a pod = %+v", p.GPU)
	}

	withSpec, err := LoadTasks(writeFile(t, dir, "spec.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\np,1000,1,1,1000,V100M16|V100M32\n"))
	if err != nil || len(withSpec[0].Models) != 2 || withSpec[0].Models[1] != "V100M32" {
		t.Fatalf("gpu_spec = %+v, %v", withSpec, err)
	}

	_, err = LoadTasks(writeFile(t, dir, "bad.csv", "name,cpu,memory_mib\np,1,1\n"))
	if err == nil || !strings.Contains(err.Error(), `missing column "cpu_milli"`) {
		t.Fatalf("missing column error = %v", err)
	}
}

func TestArrivalOrderInflatesByResampling(t *testing.T) {
	tasks := []Task{{Name: "a", NumGPU: 1, GPUMilli: 1000}, {Name: "b", NumGPU: 1, GPUMilli: 500}, {Name: "c"}, {Name: "d", NumGPU: 2, GPUMilli: 1000}}
	const target = 13000
	order := arrivalOrder(tasks, 42, target)
	seen := map[int]bool{}
	for _, i := range order[:len(tasks)] {
		seen[i] = true
	}
	if len(seen) != len(tasks) {
		t.Fatalf("the first %d arrivals %v are not a shuffle of all tasks", len(tasks), order[:len(tasks)])
	}
	var requested int64
	for k, i := range order {
		if k == len(order)-1 && requested >= target {
			t.Fatalf("kept drawing after reaching the target: %v", order)
		}
		requested += tasks[i].RequestedGPUMilli()
	}
	if requested < target {
		t.Fatalf("requested %d milli, want at least %d", requested, target)
	}
	if again := arrivalOrder(tasks, 42, target); !equal(again, order) {
		t.Fatal("the same seed gave another order")
	}
}

func equal(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestReplayTinyTrace(t *testing.T) {
	dir := t.TempDir()
	nodes, _ := LoadNodes(writeFile(t, dir, "nodes.csv", tinyNodes))
	// Six one-GPU tasks fill the six GPUs exactly; what arrives beyond fails.
	tasks, _ := LoadTasks(writeFile(t, dir, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n"+
		"p0,2000,1024,1,1000\np1,2000,1024,1,1000\np2,2000,1024,1,1000\np3,2000,1024,1,1000\np4,2000,1024,1,1000\np5,2000,1024,1,1000\n"))
	cfg := Config{Nodes: nodes, Tasks: tasks, Policies: []string{"fgd", "bestfit"}, Seeds: []uint64{1, 2}, Inflate: 1.3}
	result, err := Replay(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(result.Runs) != 4 || result.CapacityMilli != 6000 {
		t.Fatalf("runs = %d, capacity = %d", len(result.Runs), result.CapacityMilli)
	}
	for _, run := range result.Runs {
		if run.Placed != 6 || run.Failed != run.Tasks-6 || run.Tasks != 8 {
			t.Errorf("%s seed %d: placed %d, failed %d of %d, want 6 placed of 8", run.Policy, run.Seed, run.Placed, run.Failed, run.Tasks)
		}
		if run.Unallocated[100] != 0 || run.Unallocated[130] != 0 {
			t.Errorf("%s seed %d: unallocated at 100%% and 130%% = %v, %v, want 0", run.Policy, run.Seed, run.Unallocated[100], run.Unallocated[130])
		}
		for x, u := range run.Unallocated {
			if math.IsNaN(u) || u < 0 || u > 100 || (x <= 100 && u > 100-float64(x)) {
				t.Fatalf("%s seed %d: unallocated at %d%% = %v", run.Policy, run.Seed, x, u)
			}
		}
	}

	rep := NewReport(cfg, result, "nodes.csv", "pods.csv")
	for _, key := range []string{"90", "95", "100", "110", "120", "130"} {
		if _, ok := rep.UnallocatedPct[key]; !ok {
			t.Errorf("report lacks unallocated_pct[%q]", key)
		}
	}
	if rep.Policy != "fgd" || len(rep.PerSeed) != 2 || rep.PerSeed["2"]["100"] != 0 || len(rep.Policies) != 2 {
		t.Errorf("report = %+v", rep)
	}

	out := t.TempDir()
	curves := Curves(result)
	if err := WriteCSV(out, "tiny", cfg.Inflate, curves); err != nil {
		t.Fatal(err)
	}
	summary, _ := os.ReadFile(filepath.Join(out, "summary.csv"))
	if !strings.HasPrefix(string(summary), "workload,policy,arrived_pct,unallocated_pct_mean,unallocated_pct_sd,n_seeds\ntiny,fgd,90,") {
		t.Errorf("summary.csv = %q", summary)
	}
}

func TestReplayRejectsUnknownPolicy(t *testing.T) {
	_, err := Replay(context.Background(), Config{Tasks: []Task{{Name: "a"}}, Policies: []string{"nope"}, Inflate: 1})
	if err == nil || !strings.Contains(err.Error(), "valid policies") {
		t.Fatalf("error = %v", err)
	}
}

func TestWritePlot(t *testing.T) {
	path := filepath.Join(t.TempDir(), "plot.png")
	y := make([]float64, 131)
	for x := range y {
		y[x] = math.Max(100-float64(x), 5)
	}
	lines := []PlotLine{{Label: "fgd", Y: y}, {Label: "FGD (published)", Points: map[int]float64{90: 10, 100: 4.8, 130: 4.6}}}
	if err := WritePlot(path, "test", 80, lines); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatal(err)
	}
	if b := img.Bounds(); b.Dx() != plotWidth || b.Dy() != plotHeight {
		t.Fatalf("plot is %v", b)
	}
	first := plotColors[0]
	found := false
	for yy := 0; yy < plotHeight && !found; yy++ {
		for xx := 0; xx < plotWidth; xx++ {
			r, g, b, _ := img.At(xx, yy).RGBA()
			if uint8(r>>8) == first.R && uint8(g>>8) == first.G && uint8(b>>8) == first.B {
				found = true
				break
			}
		}
	}
	if !found {
		t.Fatal("the first line's colour appears nowhere in the plot")
	}
}

func TestRemix(t *testing.T) {
	dir := t.TempDir()
	nodes, _ := LoadNodes(writeFile(t, dir, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\nbig,64000,1,8,A\nsmall,64000,1,1,B\n"))
	var tasks []Task
	for i := 0; i < 200; i++ {
		tasks = append(tasks, Task{Name: "one", NumGPU: 1, GPUMilli: 1000}, Task{Name: "share", NumGPU: 1, GPUMilli: 300},
			Task{Name: "four", NumGPU: 4, GPUMilli: 1000}, Task{Name: "cpu"})
	}
	// multigpu50: every task kept, multi-GPU tasks added until they request half
	// the GPU (the authors' multigpu50 is the default trace followed by 909 of them).
	multi, err := Remix(tasks, nodes, "multigpu", 0.5, 7)
	if err != nil {
		t.Fatal(err)
	}
	var multiGPU, allGPU int64
	cpuOnly := 0
	for i, task := range multi {
		if strings.Contains(task.Name, "remix") {
			t.Fatalf("multigpu50 added task %d (%s) to a trace where multi-GPU tasks request more than half the GPU", i, task.Name)
		}
		if task.NumGPU == 0 {
			cpuOnly++
		}
		if task.NumGPU > 1 {
			multiGPU += task.RequestedGPUMilli()
		}
		allGPU += task.RequestedGPUMilli()
	}
	// Multi-GPU tasks request 0.755 of the GPU before: 0.5 is below, so some go.
	if got := float64(multiGPU) / float64(allGPU); math.Abs(got-0.5) > 0.01 || cpuOnly != 200 {
		t.Fatalf("multigpu50: multi-GPU tasks request %.3f of the GPU, %d CPU-only tasks; want 0.50 and 200", got, cpuOnly)
	}
	multi, err = Remix(tasks, nodes, "multigpu", 0.9, 7)
	if err != nil {
		t.Fatal(err)
	}
	multiGPU, allGPU = 0, 0
	for i, task := range multi {
		if i < len(tasks) && task.Name != tasks[i].Name {
			t.Fatalf("multigpu90 changed task %d: %+v, was %+v", i, task, tasks[i])
		}
		if i >= len(tasks) && task.NumGPU < 2 {
			t.Fatalf("multigpu90 added a %d-GPU task", task.NumGPU)
		}
		if task.NumGPU > 1 {
			multiGPU += task.RequestedGPUMilli()
		}
		allGPU += task.RequestedGPUMilli()
	}
	if got := float64(multiGPU) / float64(allGPU); math.Abs(got-0.9) > 0.01 || len(multi) <= len(tasks) {
		t.Fatalf("multigpu90: multi-GPU tasks request %.3f of the GPU over %d tasks; want 0.90 over more than %d", got, len(multi), len(tasks))
	}

	// On a cluster without openb's models, a constrained task gets one model whose
	// nodes can take it.
	spec, err := Remix(tasks, nodes, "gpuspec", 1, 7)
	if err != nil {
		t.Fatal(err)
	}
	models := map[string]int{}
	for _, task := range spec {
		if task.NumGPU == 0 {
			continue
		}
		if len(task.Models) != 1 {
			t.Fatalf("gpuspec=1 left a GPU task with models %v", task.Models)
		}
		if task.NumGPU > 1 && task.Models[0] != "A" {
			t.Fatalf("a %d-GPU task was restricted to model %s, whose nodes have 1 GPU", task.NumGPU, task.Models[0])
		}
		models[task.Models[0]]++
	}
	if models["A"] == 0 || models["B"] == 0 {
		t.Fatalf("models drawn = %v, want both", models)
	}
	if _, _, err := ParseRemix("multigpu=2"); err == nil {
		t.Fatal("ParseRemix accepted a fraction above 1")
	}

	// The published families: gpushare40 has 40 % of the GPU requested in shares,
	// as many GPU tasks as before; cpu250 has 25 % CPU-only tasks.
	kind, fraction, err := ParseRemix("gpushare40")
	if err != nil || kind != "gpushare" || fraction != 0.4 {
		t.Fatalf(`ParseRemix("gpushare40") = %q, %v, %v`, kind, fraction, err)
	}
	var plain []Task
	for i := 0; i < 300; i++ {
		plain = append(plain, Task{Name: "one", NumGPU: 1, GPUMilli: 1000}, Task{Name: "share", NumGPU: 1, GPUMilli: 300})
	}
	share, err := Remix(plain, nodes, kind, fraction, 7)
	if err != nil {
		t.Fatal(err)
	}
	var shared, all, gpuTasks int64
	for _, task := range share {
		if task.NumGPU == 1 && task.GPUMilli < 1000 {
			shared += task.RequestedGPUMilli()
		}
		all += task.RequestedGPUMilli()
		if task.NumGPU > 0 {
			gpuTasks++
		}
	}
	if got := float64(shared) / float64(all); math.Abs(got-0.4) > 0.005 || gpuTasks != 600 {
		t.Fatalf("gpushare40: shares are %.3f of the GPU requested over %d GPU tasks, want 0.40 over 600", got, gpuTasks)
	}
	if kind, fraction, err = ParseRemix("cpu250"); err != nil || kind != "cpu" || fraction != 0.25 {
		t.Fatalf(`ParseRemix("cpu250") = %q, %v, %v`, kind, fraction, err)
	}
	cpu, err := Remix(tasks, nodes, kind, fraction, 7)
	if err != nil {
		t.Fatal(err)
	}
	cpuOnly = 0
	for _, task := range cpu {
		if task.NumGPU == 0 {
			cpuOnly++
		}
	}
	if cpuOnly != 200 || len(cpu) != 800 {
		t.Fatalf("cpu250: %d CPU-only tasks of %d, want 200 of 800", cpuOnly, len(cpu))
	}
	// cpu050 keeps a subset of the CPU-only tasks (no repeats), every GPU task.
	cpu, err = Remix(tasks, nodes, "cpu", 0.05, 7)
	if err != nil {
		t.Fatal(err)
	}
	cpuOnly = 0
	for _, task := range cpu {
		if task.NumGPU == 0 {
			cpuOnly++
			if strings.Contains(task.Name, "remix") {
				t.Fatalf("cpu050 drew a CPU-only task (%s) rather than keeping a subset", task.Name)
			}
		}
	}
	if want := int(math.Round(0.05 / 0.95 * 600)); cpuOnly != want || len(cpu) != 600+want {
		t.Fatalf("cpu050: %d CPU-only tasks of %d, want %d of %d", cpuOnly, len(cpu), want, 600+want)
	}
	if _, _, err := ParseRemix("gpushare"); err == nil {
		t.Fatal(`ParseRemix("gpushare") accepted a family without its percentage`)
	}
}

// TestRemixProductionSpecs: on openb's models, gpuspec draws production's
// constraints (T4 most often), only ones some node can satisfy, on the given
// fraction of the GPU tasks.
func TestRemixProductionSpecs(t *testing.T) {
	dir := t.TempDir()
	nodes, err := LoadNodes(writeFile(t, dir, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model\n"+
		"t4,104000,524288,2,T4\ng2,96000,393216,8,G2\nv100,96000,786432,8,V100M32\np100,64000,262144,2,P100\n"))
	if err != nil {
		t.Fatal(err)
	}
	var tasks []Task
	for i := 0; i < 1000; i++ {
		tasks = append(tasks, Task{Name: "one", MilliCPU: 8000, NumGPU: 1, GPUMilli: 1000}, Task{Name: "eight", MilliCPU: 64000, NumGPU: 8, GPUMilli: 1000}, Task{Name: "cpu", MilliCPU: 4000})
	}
	spec, err := Remix(tasks, nodes, "gpuspec", 0.33, 3)
	if err != nil {
		t.Fatal(err)
	}
	constrained, gpuTasks := 0, 0
	bySpec := map[string]int{}
	for _, task := range spec {
		if task.NumGPU == 0 {
			if task.Models != nil {
				t.Fatal("a CPU-only task was given GPU models")
			}
			continue
		}
		gpuTasks++
		if task.Models == nil {
			continue
		}
		constrained++
		s := strings.Join(task.Models, "|")
		if task.NumGPU == 1 {
			bySpec[s]++
		}
		if task.NumGPU == 8 && !strings.Contains(s, "G2") && !strings.Contains(s, "V100M32") {
			t.Fatalf("an 8-GPU task may run only on %s, where no node has 8 GPUs", s)
		}
	}
	if got := float64(constrained) / float64(gpuTasks); math.Abs(got-0.33) > 0.001 {
		t.Fatalf("%.3f of the GPU tasks are constrained, want 0.33", got)
	}
	for s, n := range bySpec {
		if s != "T4" && n > bySpec["T4"] {
			t.Fatalf("%s (%d tasks) drawn more often than T4 (%d): %v", s, n, bySpec["T4"], bySpec)
		}
	}
	if bySpec["G3"] > 0 {
		t.Fatal("G3 drawn on a cluster without G3 nodes")
	}
}
