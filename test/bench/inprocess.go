package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"time"

	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/pkg/kube"
)

// ProfileLabel marks the scheduler's goroutines in CPU profiles of the in-process
// mode, so that the harness's own watch can be told apart:
// `go tool pprof -tagfocus component=gantry-scheduler`.
const ProfileLabel = "component"

// startGantryInProcess runs the scheduler through kube.Run in this process, as
// cmd/scheduler does without leader election, with a CPU profile from its start until
// stop. The heap profile, if asked for, is written at stop after a GC. The collector
// runs at the harness's pace, not at the one cmd/scheduler sets (gctune.go): the heap
// is the whole process's. `-profile-dir` profiles the binary itself.
func startGantryInProcess(ctx context.Context, base *rest.Config, qps int, cpuProfile, heapProfile string) (stop func() error, err error) {
	cfg := rest.CopyConfig(base)
	cfg.QPS, cfg.Burst = float32(qps), qps
	cfg.UserAgent = string(Gantry)
	// The config cmd/scheduler gives kube.Run has no wire format of its own: kube.Run
	// picks it (protobuf for the typed clients, JSON for the dynamic one).
	cfg.ContentType = ""
	var cpuFile *os.File
	if cpuProfile != "" {
		if cpuFile, err = os.Create(cpuProfile); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, fmt.Errorf("start CPU profile: %w", err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	errc := make(chan error, 1)
	go pprof.Do(runCtx, pprof.Labels(ProfileLabel, string(Gantry)), func(ctx context.Context) {
		errc <- kube.Run(ctx, kube.Options{RestConfig: cfg, SchedulerNames: []string{string(Gantry)}})
	})
	return func() error {
		var errs []error
		if cpuFile != nil {
			pprof.StopCPUProfile()
			errs = append(errs, cpuFile.Close())
		}
		if heapProfile != "" {
			runtime.GC()
			f, err := os.Create(heapProfile)
			if err == nil {
				err = pprof.WriteHeapProfile(f)
				errs = append(errs, f.Close())
			}
			errs = append(errs, err)
		}
		cancel()
		select {
		case err := <-errc:
			if err != nil && !errors.Is(err, context.Canceled) {
				errs = append(errs, err)
			}
		case <-time.After(10 * time.Second):
			errs = append(errs, errors.New("kube.Run did not return 10s after cancel"))
		}
		return errors.Join(errs...)
	}, nil
}
