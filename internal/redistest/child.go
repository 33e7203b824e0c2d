package redistest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"testing"
)

// childEnv carries a child process's spec: with it set, the test binary runs
// as a child (see RunChild) instead of running tests.
const childEnv = "DLM_TEST_CHILD"

// RunChild is for TestMain: in a process started by StartChild it decodes
// the spec into spec, calls run and exits with its code; elsewhere it
// returns at once.
func RunChild[S any](run func(spec S) int) {
	raw := os.Getenv(childEnv)
	if raw == "" {
		return
	}
	var spec S
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, "redistest: child spec:", err)
		os.Exit(2)
	}
	os.Exit(run(spec))
}

// StartChild runs the test binary again as a child process with spec (see
// RunChild), its stderr on this process's, and returns it with its stdout.
// The child is killed when the test ends and, whatever ends this process,
// when this process dies (Pdeathsig).
func StartChild(t testing.TB, spec any) (*exec.Cmd, io.Reader) {
	t.Helper()
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(raw))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return cmd, out
}

// Must fails t when err is not nil, or panics when t is nil (in a child
// process started by StartChild, which has no testing.TB).
func Must(t testing.TB, err error) {
	if err == nil {
		return
	}
	if t == nil {
		panic(err)
	}
	t.Helper()
	t.Fatal(err)
}
