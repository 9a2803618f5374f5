package bench

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// warmUp creates one pod for sched and waits until it is bound, so that steady
// arrivals start on a scheduler whose informers have synced. The recorder ignores it.
func warmUp(ctx context.Context, client kubernetes.Interface, s Scenario, sched Scheduler, timeout time.Duration) error {
	p := pod(0, s, sched)
	p.Name, p.Annotations = warmupPrefix+"0", nil
	if _, err := client.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create warm-up pod: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		got, err := client.CoreV1().Pods(Namespace).Get(ctx, p.Name, metav1.GetOptions{})
		if err == nil && got.Spec.NodeName != "" {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("warm-up pod not bound %s after the scheduler's start (last error: %v)", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// arrive creates the scenario's pods at s.Rate a second, pod i due at i/Rate after
// the start, on workers goroutines, noting when each creation is sent. A machine
// that cannot keep up sends late; the achieved rate is reported.
func arrive(ctx context.Context, client kubernetes.Interface, s Scenario, sched Scheduler, rec *bindRecorder, workers int) error {
	start := time.Now()
	interval := time.Second / time.Duration(s.Rate)
	return parallel(ctx, s.Pods, workers, func(ctx context.Context, i int) error {
		if wait := time.Until(start.Add(time.Duration(i) * interval)); wait > 0 {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(wait):
			}
		}
		p := pod(i, s, sched)
		rec.created(p.Name, time.Now())
		if _, err := client.CoreV1().Pods(Namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create pod %d: %w", i, err)
		}
		return nil
	})
}
