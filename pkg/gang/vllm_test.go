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
	two := "applications:\n- args:\n    llm_configs:\n    - engine_kwargs: {gpu_memory_utilization: 0.5}\n- name: other\n  args: 5\n"
	if got := ServeGPUMemoryUtilization(two); got != 0.5 {
		t.Errorf("an unreadable second application: %v, want the first's 0.5", got)
	}
	if got := ServeGPUMemoryUtilization("applications:\n- args:\n    llm_configs:\n    - engine_kwargs: {gpu_memory_utilization: \"0.4\"}\n"); got != 0.4 {
		t.Errorf("a quoted number: %v, want 0.4 as vLLM reads it", got)
	}
	if got := ServeGPUMemoryUtilization(":::"); got != 0 {
		t.Errorf("unreadable config: %v, want 0", got)
	}
}
