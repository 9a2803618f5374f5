package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The timeline lists every timed pod by creation, with its latency, and leaves the
// bound column empty for a pod never seen bound.
func TestTimelineListsPodsByCreation(t *testing.T) {
	r := newBindRecorder(3, 0)
	t0 := time.Unix(100, 0)
	r.created("b", t0.Add(10*time.Millisecond))
	r.created("a", t0)
	r.created("c", t0.Add(20*time.Millisecond))
	bound := func(name string, at time.Time) {
		r.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n"}}, at)
	}
	bound("a", t0.Add(5*time.Millisecond))
	bound("b", t0.Add(42500*time.Microsecond))
	path := filepath.Join(t.TempDir(), "timeline.tsv")
	if err := r.writeTimeline(path); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"pod\tsent_ms\tbound_ms\tlatency_ms",
		"a\t0.0\t5.0\t5.0",
		"b\t10.0\t42.5\t32.5",
		"c\t20.0\t\t",
	}, "\n") + "\n"
	if string(got) != want {
		t.Errorf("timeline:\n%s\nwant:\n%s", got, want)
	}
	empty := filepath.Join(t.TempDir(), "none.tsv")
	if err := newBindRecorder(1, 0).writeTimeline(empty); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(empty); !os.IsNotExist(err) {
		t.Errorf("a run without timed creations wrote a timeline (%v)", err)
	}
}
