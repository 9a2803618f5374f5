package gang

import (
	"encoding/json"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"
)

// vLLM's default gpu_memory_utilization: the share of each GPU's memory an engine
// takes, and must find free, at start.
const vllmDefaultGPUMemoryUtilization = 0.9

// serveApplication is the part of one application of a RayService's serveConfigV2
// that says how much GPU memory its Ray Serve LLM engines take.
type serveApplication struct {
	Args struct {
		LLMConfigs []struct {
			EngineKwargs map[string]any `json:"engine_kwargs"`
		} `json:"llm_configs"`
	} `json:"args"`
}

// ServeGPUMemoryUtilization returns the largest gpu_memory_utilization among the LLM
// engines of a serveConfigV2 document (vLLM's default 0.9 for an engine that does not
// set it, or sets it to something vLLM would not take), or 0 when the document runs no
// LLM engine or cannot be read. vLLM refuses to start when less than this fraction of
// a GPU's memory is free. Each application is read on its own: one the scheduler
// cannot read (a non-LLM application with args: 5, say) does not hide the engines of
// the others (fuzz finding).
func ServeGPUMemoryUtilization(serveConfigV2 string) float64 {
	if serveConfigV2 == "" {
		return 0
	}
	var doc struct {
		Applications []json.RawMessage `json:"applications"`
	}
	if err := yaml.Unmarshal([]byte(serveConfigV2), &doc); err != nil {
		return 0
	}
	best := 0.0
	for _, raw := range doc.Applications {
		var app serveApplication
		if err := json.Unmarshal(raw, &app); err != nil {
			continue
		}
		for _, llm := range app.Args.LLMConfigs {
			if u := engineUtilization(llm.EngineKwargs["gpu_memory_utilization"]); u > best {
				best = u
			}
		}
	}
	return best
}

// engineUtilization reads an engine's gpu_memory_utilization, a number or a quoted
// number (vLLM's argument parser takes "0.5"), in (0, 1]; anything else is vLLM's
// default.
func engineUtilization(v any) float64 {
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		var err error
		if f, err = strconv.ParseFloat(strings.TrimSpace(x), 64); err != nil {
			return vllmDefaultGPUMemoryUtilization
		}
	default:
		return vllmDefaultGPUMemoryUtilization
	}
	if f > 0 && f <= 1 { // NaN fails both
		return f
	}
	return vllmDefaultGPUMemoryUtilization
}
