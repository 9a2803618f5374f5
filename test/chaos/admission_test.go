package chaos

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestAdmissionRefusesBadGPUAnnotations posts pods through the real API server and the
// built scheduler's pod webhook (the chaos cluster's webhook-only replica): a GPU
// annotation the scheduler could never read is refused at admission with what to
// write instead; KAI's unit-less MiB and a quantity with a unit are admitted.
func TestAdmissionRefusesBadGPUAnnotations(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "admission"
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cleanNamespace(ctx, ns) }()
	pod := func(i int, key, value string) *corev1.Pod {
		p := newPod(ns, podSpec{name: fmt.Sprintf("p-%d", i), class: "build"})
		p.Spec.SchedulerName = "nobody" // admission only: nothing binds it
		p.Annotations[key] = value
		return p
	}
	for i, tc := range []struct {
		key, value, refusal string // refusal "": admitted
	}{
		{"gantry.dev/gpu-fraction", "NaN", "use a number above 0 and at most 1"},
		{"gantry.dev/gpu-fraction", "-0.25", "use a number above 0 and at most 1"},
		{"gantry.dev/gpu-fraction", "1.5", "use a number above 0 and at most 1"},
		{"gantry.dev/gpu-memory", "20GB", "a quantity with a unit (20Gi)"},
		{"gantry.dev/gpu-memory", "-2000", "not a positive amount of memory"},
		{"gantry.dev/gpu-memory", "Inf", "not a positive amount of memory"},
		{"gantry.dev/gpus", "0,x", "gantry.dev/gpus"},
		{"gantry.dev/gpu-memory", "2000", ""},
		{"gantry.dev/gpu-memory", "20Gi", ""},
		{"gantry.dev/gpu-fraction", "0.25", ""},
	} {
		name := fmt.Sprintf("%s=%q", tc.key, tc.value)
		err := createRefusedOrAdmitted(ctx, pod(i, tc.key, tc.value), tc.refusal != "")
		switch {
		case tc.refusal == "" && err != nil:
			t.Errorf("%s: refused, want admitted: %v", name, err)
		case tc.refusal != "" && err == nil:
			t.Errorf("%s: admitted (three tries), want refused with %q", name, tc.refusal)
		case tc.refusal != "" && !strings.Contains(err.Error(), tc.refusal):
			t.Errorf("%s: refused with %q, want a message with %q", name, err, tc.refusal)
		default:
			t.Logf("%s: %v", name, err)
		}
	}
}

// createRefusedOrAdmitted creates p. The pod webhook fails open (failurePolicy
// Ignore, a 2 s timeout), so on a loaded machine one call can time out and let a bad
// pod in: when a refusal is expected, an admitted pod is deleted and posted again,
// three times at most.
func createRefusedOrAdmitted(ctx context.Context, p *corev1.Pod, wantRefused bool) error {
	var err error
	for try := 0; try < 3; try++ {
		_, err = env.Client.CoreV1().Pods(p.Namespace).Create(ctx, p.DeepCopy(), metav1.CreateOptions{})
		if err != nil || !wantRefused {
			return err
		}
		zero := int64(0)
		if err := env.Client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			return fmt.Errorf("delete the admitted pod: %w", err)
		}
		if err := waitGone(ctx, p.Namespace, p.Name); err != nil {
			return err
		}
	}
	return nil
}

func waitGone(ctx context.Context, ns, name string) error {
	for {
		if _, err := env.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}
