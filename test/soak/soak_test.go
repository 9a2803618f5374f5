package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/test/chaos"
	"github.com/gantry-dev/gantry/test/invariant"
	"github.com/gantry-dev/gantry/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv("SOAK_DURATION") == "" {
		// Not asked for: no control plane, TestSoak skips (`go test ./...` stays quick).
		os.Exit(m.Run())
	}
	// SOAK_KUBERAY=0 leaves the KubeRay operator and the Ray churn out.
	os.Exit(testenv.RunMain(m, testenv.Options{Kwok: true, ControllerManager: true, KubeRay: os.Getenv("SOAK_KUBERAY") != "0"}, &env))
}

const (
	ns              = "soak"
	contendedNodes  = 50 // training and inference fight over these
	gpusPerNode     = 8
	trainGangSize   = 8
	trainGangs      = 45 // 360 of the contended pool's 400 GPUs
	inferenceGangs  = 6  // 6 × 4 pods × 2 GPUs: 48 GPUs, more than the 40 left free
	inferencePods   = 4
	inferenceGPUs   = 2
	rayClusterCount = 20
)

// TestSoak: SOAK_DURATION of churn (Ray clusters created, scaled and deleted,
// inference bursts preempting training, queue edits) on SOAK_NODES kwok nodes
// (default 1000), sampling gantry-scheduler's /metrics every SOAK_SAMPLE (default 10s).
// It fails on any invariant violation; the flatness figures are reported (and written
// as JSON to SOAK_OUT when set) for a reader to judge against the goals.
func TestSoak(t *testing.T) {
	if env == nil {
		t.Skip("soak: set SOAK_DURATION (make soak)")
	}
	duration := mustDuration(t, "SOAK_DURATION", 30*time.Minute)
	sampleEvery := mustDuration(t, "SOAK_SAMPLE", 10*time.Second)
	nodes := 1000
	if s := os.Getenv("SOAK_NODES"); s != "" {
		if _, err := fmt.Sscan(s, &nodes); err != nil || nodes <= contendedNodes {
			t.Fatalf("SOAK_NODES=%q: want a number above %d", s, contendedNodes)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	bin, err := chaos.BuildScheduler(env.Dir)
	if err != nil {
		t.Fatal(err)
	}
	setupCluster(t, ctx, nodes)
	// SOAK_SCHED_ARGS: extra gantry-scheduler flags, e.g. "-v=2" to log each failed
	// pending-reason write when a LostPod is being chased.
	sched, err := chaos.StartScheduler(ctx, env, bin, false, nil, strings.Fields(os.Getenv("SOAK_SCHED_ARGS"))...)
	if err != nil {
		t.Fatal(err)
	}
	checker := invariant.Watch(t, invariant.Config{RestConfig: env.Config, Interval: 2 * time.Second, Rules: invariant.Rules{
		SchedulerNames: []string{"gantry-scheduler", "kai-scheduler"}, GangGrace: 30 * time.Second, BoundTime: 2 * time.Minute,
		Namespaces: []string{ns},
	}})

	churnCtx, stopChurn := context.WithTimeout(ctx, duration)
	defer stopChurn()
	c := &churn{rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7)), t: t}
	if c.dyn, err = dynamic.NewForConfig(env.Config); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	loops := []func(context.Context){c.training, c.inferenceBursts, c.queueEdits}
	if os.Getenv("SOAK_KUBERAY") != "0" {
		loops = append(loops, c.rayClusters)
	} else {
		t.Log("soak: SOAK_KUBERAY=0: no Ray clusters")
	}
	for _, loop := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); loop(churnCtx) }()
	}
	var samples []Sample
	tick := time.NewTicker(sampleEvery)
	for done := false; !done; {
		select {
		case <-churnCtx.Done():
			done = true
		case <-tick.C:
			s, err := scrape(sched.MetricsAddr)
			if err != nil {
				t.Errorf("sample: %v", err)
				continue
			}
			s.Load1 = load1()
			s.AnonRSSBytes, s.FileRSSBytes = procRSS(sched.PID)
			samples = append(samples, s)
		}
	}
	tick.Stop()
	wg.Wait()
	if s, err := scrape(sched.MetricsAddr); err == nil {
		s.Load1 = load1()
		s.AnonRSSBytes, s.FileRSSBytes = procRSS(sched.PID)
		samples = append(samples, s)
	}
	report, err := Summarize(samples, duration/6, duration/6)
	if err != nil {
		t.Fatal(err)
	}
	// Counted now; the checker fails the test with each one at cleanup.
	report.Violations = len(checker.Violations())
	t.Logf("%s\n  churn: %s", report, c.counts())
	if out := os.Getenv("SOAK_OUT"); out != "" {
		b, _ := json.MarshalIndent(map[string]any{"report": report, "samples": samples, "churn": c.counts()}, "", "  ")
		if err := os.WriteFile(out, b, 0o644); err != nil {
			t.Error(err)
		}
	}
}

func scrape(addr string) (Sample, error) {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return Sample{}, err
	}
	defer resp.Body.Close()
	return ParseSample(time.Now(), resp.Body)
}

// load1 is this machine's 1-minute load average, 0 where /proc/loadavg is missing.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	if _, err := fmt.Sscan(string(b), &l); err != nil {
		return 0
	}
	return l
}

// procRSS is the process's resident anonymous memory and file pages (RssAnon and
// RssFile in /proc/PID/status), 0 where they cannot be read.
func procRSS(pid int) (anon, file float64) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	return parseRSS(string(b), "RssAnon:"), parseRSS(string(b), "RssFile:")
}

func mustDuration(t *testing.T, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d <= 0 {
		t.Fatalf("%s=%q: want a duration such as 30m", name, s)
	}
	return d
}

// setupCluster creates the nodes (the first contendedNodes in pool "contended", the
// rest in pool "ray"), priority classes, queues and the namespace.
func setupCluster(t *testing.T, ctx context.Context, nodes int) {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.ApplyFile(ctx, env.Config, "", filepath.Join(root, "deploy", "manifests", "priorityclasses.yaml")); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.Apply(ctx, env.Config, "", []byte(soakQueues(4000))); err != nil {
		t.Fatal(err)
	}
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": *resource.NewQuantity(gpusPerNode, resource.DecimalSI),
	}
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	sem := make(chan struct{}, 16)
	for i := 0; i < nodes; i++ {
		pool := "ray"
		if i < contendedNodes {
			pool = "contended"
		}
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("soak-%04d", i), Labels: map[string]string{
			testenv.KwokNodeLabel: testenv.KwokNodeLabelValue, "soak-pool": pool,
			"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.present": "true",
		}, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}}, Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}}
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("create node: %v", err)
	}
}

func soakQueues(trainLimit int) string {
	return fmt.Sprintf(`
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: default}
spec:
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: soak-train}
spec:
  resources:
    gpu: {quota: 100, limit: %d, overQuotaWeight: 1}
`, trainLimit)
}
