package chaos

import (
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/test/testenv"
)

// The restart the rounds rely on: same name, same command line, a new process, and
// the old one gone. Runs without a control plane (also under -short).
func TestRestartKeepsCommandLine(t *testing.T) {
	e := &testenv.Env{Dir: t.TempDir()}
	defer func() {
		if err := e.Stop(); err != nil {
			t.Error(err)
		}
	}()
	if _, err := e.StartProcess("sleeper", "/bin/sleep", false, "600"); err != nil {
		t.Fatal(err)
	}
	before, oldPID, err := capture(e, "sleeper")
	if err != nil {
		t.Fatal(err)
	}
	if err := restart(e, "sleeper", 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	after, newPID, err := capture(e, "sleeper")
	if err != nil {
		t.Fatal(err)
	}
	if newPID == oldPID || !slices.Equal(before.args, after.args) || after.args[len(after.args)-1] != "600" {
		t.Fatalf("restart: pid %d → %d, args %q → %q", oldPID, newPID, before.args, after.args)
	}
	if err := e.Exited("sleeper"); err != nil {
		t.Fatalf("restarted process not running: %v", err)
	}
}
