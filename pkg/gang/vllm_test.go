package gang

import "testing"

func TestServeGPUMemoryUtilization(t *testing.T) {
	seed := `applications:
- name: llms
  args:
    llm_configs:
    - engine_kwargs:
        gpu_memory_utilization: 0.75
        tensor_parallel_size: 1
`
	if got := ServeGPUMemoryUtilization(seed); got != 0.75 {
		t.Errorf("seed config: %v, want 0.75", got)
	}
	if got := ServeGPUMemoryUtilization("applications:\n- args:\n    llm_configs:\n    - engine_kwargs: {}\n"); got != vllmDefaultGPUMemoryUtilization {
		t.Errorf("engine without the setting: %v, want vLLM's default %v", got, vllmDefaultGPUMemoryUtilization)
	}
	if got := ServeGPUMemoryUtilization("applications:\n- import_path: app:main\n"); got != 0 {
		t.Errorf("no LLM engine: %v, want 0", got)
	}
	if got := ServeGPUMemoryUtilization(":::"); got != 0 {
		t.Errorf("unreadable config: %v, want 0", got)
	}
}
