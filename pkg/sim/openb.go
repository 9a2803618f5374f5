package sim

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Task is one row of an openb pod list.
type Task struct {
	Name        string
	MilliCPU    int64
	MemoryBytes int64
	// NumGPU GPUs, each GPUMilli thousandths of a GPU (1000: whole GPUs).
	NumGPU   int
	GPUMilli int64
	// Models are the accepted GPU models; empty accepts any.
	Models []string
}

// RequestedGPUMilli is the GPU capacity the task asks for, in thousandths of a GPU.
func (t Task) RequestedGPUMilli() int64 { return int64(t.NumGPU) * t.GPUMilli }

// Pod is the task as the placement core sees it.
func (t Task) Pod() *model.Pod {
	p := &model.Pod{
		ID:       model.PodID("openb/" + t.Name),
		Requests: model.Resources{MilliCPU: t.MilliCPU, MemoryBytes: t.MemoryBytes, Pods: 1},
	}
	if t.NumGPU > 0 {
		p.GPU = model.GPUDemand{Count: t.NumGPU, Models: t.Models}
		if t.GPUMilli > 0 && t.GPUMilli < model.MilliPerGPU {
			p.GPU.FractionMilli = t.GPUMilli
		}
	}
	return p
}

// gpuMemoryGB is the memory, in decimal GB, given to GPUs of each openb model. The
// protocol counts GPU in thousandths, so memory only has to be the same for every
// GPU of a model and divisible by 1000 bytes (shares are then exact); the values
// are the products' own where disclosed. G1, G2, G3 are undisclosed models.
var gpuMemoryGB = map[string]int64{
	"T4": 16, "P100": 16, "V100M16": 16, "V100M32": 32, "A10": 24,
	"G1": 32, "G2": 32, "G3": 32,
}

const defaultGPUMemoryGB = 32

// maxPodsPerNode is a node's pod slots in the replay: the protocol does not limit
// pods per node.
const maxPodsPerNode = 1 << 20

// LoadNodes reads an openb node list (columns sn, cpu_milli, memory_mib, gpu, model;
// by header name, in any order). GPU nodes get their GPUs labelled with the model.
func LoadNodes(path string) ([]*model.Node, error) {
	rows, err := readCSV(path, []string{"sn", "cpu_milli", "memory_mib"})
	if err != nil {
		return nil, err
	}
	nodes := make([]*model.Node, 0, len(rows.records))
	for line, rec := range rows.records {
		name := rows.get(rec, "sn")
		cpu, err1 := rows.int(rec, "cpu_milli")
		memMiB, err2 := rows.int(rec, "memory_mib")
		gpus, err3 := rows.int(rec, "gpu")
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line+2, err)
		}
		gpuModel := rows.get(rec, "model")
		n := &model.Node{
			Name:        name,
			Labels:      map[string]string{"kubernetes.io/hostname": name},
			Allocatable: model.Resources{MilliCPU: cpu, MemoryBytes: memMiB << 20, Pods: maxPodsPerNode},
		}
		if gpus > 0 {
			n.Labels["nvidia.com/gpu.product"] = gpuModel
		}
		memGB, ok := gpuMemoryGB[gpuModel]
		if !ok {
			memGB = defaultGPUMemoryGB
		}
		for i := 0; i < int(gpus); i++ {
			n.GPUs = append(n.GPUs, model.GPU{
				Index:         i,
				UUID:          fmt.Sprintf("%s-gpu%d", name, i),
				Model:         gpuModel,
				MemoryBytes:   memGB * 1_000_000_000,
				LiveFreeBytes: model.UnknownBytes,
				Healthy:       true,
			})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// LoadTasks reads an openb pod list (columns name, cpu_milli, memory_mib, num_gpu,
// gpu_milli, gpu_spec; by header name; num_gpu, gpu_milli and gpu_spec may be
// missing). Other columns (qos, phase, times) are not used by the protocol.
func LoadTasks(path string) ([]Task, error) {
	rows, err := readCSV(path, []string{"name", "cpu_milli", "memory_mib"})
	if err != nil {
		return nil, err
	}
	tasks := make([]Task, 0, len(rows.records))
	for line, rec := range rows.records {
		cpu, err1 := rows.int(rec, "cpu_milli")
		memMiB, err2 := rows.int(rec, "memory_mib")
		numGPU, err3 := rows.int(rec, "num_gpu")
		gpuMilli, err4 := rows.int(rec, "gpu_milli")
		if err := errors.Join(err1, err2, err3, err4); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, line+2, err)
		}
		t := Task{Name: rows.get(rec, "name"), MilliCPU: cpu, MemoryBytes: memMiB << 20, NumGPU: int(numGPU), GPUMilli: gpuMilli}
		if t.NumGPU > 0 && t.GPUMilli == 0 {
			t.GPUMilli = model.MilliPerGPU
		}
		if t.NumGPU == 0 {
			t.GPUMilli = 0
		}
		if spec := rows.get(rec, "gpu_spec"); spec != "" {
			t.Models = strings.Split(spec, "|")
		}
		tasks = append(tasks, t)
	}
	return tasks, nil
}

type csvRows struct {
	columns map[string]int
	records [][]string
}

// readCSV reads a CSV file with a header row. required columns must be present;
// any other column may be missing, and then reads as empty.
func readCSV(path string, required []string) (*csvRows, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := csv.NewReader(f)
	r.FieldsPerRecord = -1
	header, err := r.Read()
	if err != nil {
		return nil, fmt.Errorf("read %s header: %w", path, err)
	}
	rows := &csvRows{columns: map[string]int{}}
	for i, name := range header {
		rows.columns[strings.TrimSpace(strings.TrimPrefix(name, "\ufeff"))] = i
	}
	for _, name := range required {
		if _, ok := rows.columns[name]; !ok {
			return nil, fmt.Errorf("%s: missing column %q (has %s)", path, name, strings.Join(header, ", "))
		}
	}
	for {
		rec, err := r.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", path, err)
		}
		rows.records = append(rows.records, rec)
	}
	return rows, nil
}

// get returns a cell by column name, or "" when the column or cell is missing.
func (r *csvRows) get(rec []string, column string) string {
	i, ok := r.columns[column]
	if !ok || i >= len(rec) {
		return ""
	}
	return strings.TrimSpace(rec[i])
}

// int parses a cell as an integer; an empty or missing cell is 0.
func (r *csvRows) int(rec []string, column string) (int64, error) {
	s := r.get(rec, column)
	if s == "" {
		return 0, nil
	}
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		// Some exports write integers as floats ("1000.0").
		f, ferr := strconv.ParseFloat(s, 64)
		if ferr != nil {
			return 0, fmt.Errorf("column %s: %q is not a number", column, s)
		}
		return int64(f), nil
	}
	return v, nil
}
