package redistest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A Build is a server program the tests run: a Redis or Valkey version.
// Start runs the system's redis-server; StartBuild runs a Build's.
type Build struct {
	// Name names the build in test names: "redis-7.0", "redis-6.0",
	// "valkey-8.0".
	Name string
	// Bin is the program, found by Find.
	Bin string
	// Env is added to the program's environment: LD_LIBRARY_PATH for
	// libraries unpacked beside it.
	Env []string
}

// The builds of the server matrix. Redis 7.0.15 is Debian bookworm's
// redis-server; Valkey 8.0.1 (redis_version 7.2.4) is valkey-server from
// bookworm-backports; Redis 6.0.16 is Debian bullseye's, unpacked with the
// libraries it needs into ServersDir()/redis-6.0 (redis-server and lib/).
// .ci/servers.sh, which ./test.sh runs, installs the last two.
const (
	Redis70  = "redis-7.0"
	Valkey80 = "valkey-8.0"
	Redis60  = "redis-6.0"
)

// Builds lists the names of the matrix's builds, the system's redis-server
// first.
func Builds() []string { return []string{Redis70, Valkey80, Redis60} }

// ServersEnv names the environment variable that gives the directory the
// builds not installed system-wide are unpacked in (default
// dlm-servers in the user's cache directory, ~/.cache/dlm-servers).
const ServersEnv = "DLM_SERVERS_DIR"

// ServersDir returns the directory of ServersEnv.
func ServersDir() string {
	if d := os.Getenv(ServersEnv); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return filepath.Join(os.TempDir(), "dlm-servers")
	}
	return filepath.Join(d, "dlm-servers")
}

// Find returns the build named name, skipping or failing t (as Binary
// does) when it is not installed.
func Find(t testing.TB, name string) Build {
	t.Helper()
	b, err := LookupBuild(name)
	if err == nil {
		return b
	}
	msg := fmt.Sprintf("%v (./test.sh installs it: .ci/servers.sh)", err)
	if os.Getenv(RequireEnv) == "1" {
		t.Fatalf("%s; %s=1 requires it", msg, RequireEnv)
	}
	t.Skip(msg)
	return Build{}
}

// LookupBuild returns the build named name, or an error saying what is
// missing.
func LookupBuild(name string) (Build, error) {
	switch name {
	case Redis70:
		p, err := exec.LookPath("redis-server")
		return Build{Name: name, Bin: p}, err
	case Valkey80:
		p, err := exec.LookPath("valkey-server")
		return Build{Name: name, Bin: p}, err
	case Redis60:
		dir := filepath.Join(ServersDir(), name)
		b := Build{Name: name, Bin: filepath.Join(dir, "redis-server"), Env: []string{"LD_LIBRARY_PATH=" + filepath.Join(dir, "lib")}}
		if _, err := os.Stat(b.Bin); err != nil {
			return Build{}, fmt.Errorf("redistest: Redis 6.0 is not unpacked in %s: %w", dir, err)
		}
		return b, nil
	}
	return Build{}, fmt.Errorf("redistest: no build named %q (want one of %s)", name, strings.Join(Builds(), ", "))
}

// StartBuild is Start for a build's program.
func StartBuild(t testing.TB, b Build, args ...string) *Server {
	t.Helper()
	args = append([]string{"--repl-diskless-sync-delay", "0"}, args...)
	return launch(t, &Server{bin: b.Bin, env: b.Env, dir: t.TempDir(), args: args})
}
