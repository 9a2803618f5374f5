package gang

import (
	"sigs.k8s.io/yaml"
)

// vLLM's default gpu_memory_utilization: the share of each GPU's memory an engine
// takes, and must find free, at start.
const vllmDefaultGPUMemoryUtilization = 0.9

// serveConfig is the part of a RayService's serveConfigV2 that says how much GPU
// memory Ray Serve LLM engines take.
type serveConfig struct {
	Applications []struct {
		Args struct {
			LLMConfigs []struct {
				EngineKwargs map[string]any `json:"engine_kwargs"`
			} `json:"llm_configs"`
		} `json:"args"`
	} `json:"applications"`
}

// ServeGPUMemoryUtilization returns the largest gpu_memory_utilization among the LLM
// engines of a serveConfigV2 document (vLLM's default 0.9 for an engine that does not
// set it), or 0 when the document runs no LLM engine or cannot be read. vLLM refuses
// to start when less than this fraction of a GPU's memory is free.
func ServeGPUMemoryUtilization(serveConfigV2 string) float64 {
	if serveConfigV2 == "" {
		return 0
	}
	var cfg serveConfig
	if err := yaml.Unmarshal([]byte(serveConfigV2), &cfg); err != nil {
		return 0
	}
	best := 0.0
	for _, app := range cfg.Applications {
		for _, llm := range app.Args.LLMConfigs {
			u := vllmDefaultGPUMemoryUtilization
			if v, ok := llm.EngineKwargs["gpu_memory_utilization"].(float64); ok && v > 0 && v <= 1 {
				u = v
			}
			if u > best {
				best = u
			}
		}
	}
	return best
}
