package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// consumerMain is the program the rehearsal's consumer module builds and
// runs, with nothing but `go get <core>/dlmotel@version` before.
const consumerMain = `package main

import (
	"fmt"

	"github.com/dlmgo/dlm"
	"github.com/dlmgo/dlm/dlmotel"
)

func main() {
	obs, err := dlmotel.New() // the global (no-op) OpenTelemetry providers
	if err != nil {
		panic(err)
	}
	var _ dlm.Observer = obs
	fmt.Println("consumer: dlmotel.New works; instrument", dlmotel.AcquireDuration)
}
`

// rehearse releases a copy of the working tree of the repository at
// root as version, into a module proxy on the file system, then uses the
// release as a stranger would: `go install <core>/cmd/dlm@version` and
// `dlm version`, and a new module that gets <core>/dlmotel@version alone and
// builds and runs a program importing it. The go commands see no go.work
// and an empty module cache; public modules come from the caller's module
// proxy. tmp is a scratch directory; what happens is written to log.
func rehearse(ctx context.Context, root, version, tmp string, log io.Writer) error {
	start := time.Now()
	step := func(format string, args ...any) {
		fmt.Fprintf(log, "[%6.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	src, err := loadWorkspace(root)
	if err != nil {
		return err
	}
	if err := checkVersion(src, version); err != nil {
		return err
	}

	// A repository of its own holding the working tree as it is, committed.
	repo := filepath.Join(tmp, "repo")
	n, err := snapshot(src, repo)
	if err != nil {
		return err
	}
	if _, err := git(repo, nil, "init", "-q"); err != nil {
		return err
	}
	if _, err := git(repo, gitIdentity, "add", "-A"); err != nil {
		return err
	}
	base, _ := git(root, nil, "rev-parse", "--short", "HEAD")
	if _, err := git(repo, gitIdentity, "commit", "-q", "-m", "the working tree of "+strings.TrimSpace(string(base))); err != nil {
		return err
	}
	step("snapshot: %d files of the working tree committed in %s", n, repo)

	ws, err := loadWorkspace(repo)
	if err != nil {
		return err
	}
	if err := release(ws, version, gitIdentity, lineWriter(func(line string) { step("%s", line) })); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	step("released %s in the copy", version)

	// The proxy: each released module's zip made from its tag, as the
	// module proxy makes it.
	proxyDir := filepath.Join(tmp, "proxy")
	var mods []proxyModule
	for _, m := range ws.released() {
		tag := m.tag(version)
		z, err := ws.vcsZip(m, version, tag)
		if err != nil {
			return err
		}
		gomod, err := commit{root: repo, rev: tag}.read(m.file("go.mod"))
		if err != nil {
			return err
		}
		out, err := git(repo, nil, "log", "-1", "--format=%ct", tag)
		if err != nil {
			return err
		}
		sec, err := strconv.ParseInt(strings.TrimSpace(string(out)), 10, 64)
		if err != nil {
			return err
		}
		mods = append(mods, proxyModule{Path: m.Path, Version: version, Mod: gomod, Zip: z, Time: time.Unix(sec, 0)})
		step("proxy: %s %s (%d bytes)", m.Path, version, len(z))
	}
	if err := writeProxy(proxyDir, mods); err != nil {
		return err
	}

	gobin := filepath.Join(tmp, "bin")
	env, err := isolatedEnv(proxyDir, filepath.Join(tmp, "modcache"), gobin, ws.Core.Path)
	if err != nil {
		return err
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, "GOPROXY=") || strings.HasPrefix(kv, "GONOSUMDB=") || strings.HasPrefix(kv, "GOWORK=") || strings.HasPrefix(kv, "GOMODCACHE=") {
			step("env %s", kv)
		}
	}
	run := func(dir string, name string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, name, args...)
		cmd.Dir = dir
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		t0 := time.Now()
		err := cmd.Run()
		step("$ %s %s  (%.1fs)", filepath.Base(name), strings.Join(args, " "), time.Since(t0).Seconds())
		if s := strings.TrimRight(out.String(), "\n"); s != "" {
			fmt.Fprintln(log, indent(s))
		}
		if err != nil {
			return out.String(), fmt.Errorf("%s %s: %w", name, strings.Join(args, " "), err)
		}
		return out.String(), nil
	}

	// A stranger installs the command.
	work := filepath.Join(tmp, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	if _, err := run(work, "go", "install", ws.Core.Path+"/cmd/dlm@"+version); err != nil {
		return err
	}
	out, err := run(work, filepath.Join(gobin, "dlm"), "version")
	if err != nil {
		return err
	}
	for _, want := range []string{"dlm " + version + "\n", "module " + ws.Core.Path + "/cmd/dlm\n", "library " + ws.Core.Path + " " + version + "\n"} {
		if !strings.Contains(out, want) {
			return fmt.Errorf("dlm version printed %q, without %q", out, want)
		}
	}

	// A stranger's module uses dlmotel.
	consumer := filepath.Join(tmp, "consumer")
	if err := os.MkdirAll(consumer, 0o755); err != nil {
		return err
	}
	if _, err := run(consumer, "go", "mod", "init", "example.com/consumer"); err != nil {
		return err
	}
	if _, err := run(consumer, "go", "get", ws.Core.Path+"/dlmotel@"+version); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(consumer, "main.go"), []byte(consumerMain), 0o644); err != nil {
		return err
	}
	if _, err := run(consumer, "go", "build", "-o", "consumer", "."); err != nil {
		return err
	}
	if _, err := run(consumer, filepath.Join(consumer, "consumer")); err != nil {
		return err
	}
	gomod, err := os.ReadFile(filepath.Join(consumer, "go.mod"))
	if err != nil {
		return err
	}
	for _, want := range []string{ws.Core.Path + "/dlmotel " + version, ws.Core.Path + " " + version} {
		if !bytes.Contains(gomod, []byte(want)) {
			return fmt.Errorf("the consumer's go.mod does not require %s:\n%s", want, gomod)
		}
	}
	step("rehearsal of %s passed", version)
	return nil
}

// snapshot copies the files of src's working tree that git tracks or would
// add (not those it ignores) to dir, and returns how many.
func snapshot(src *workspace, dir string) (int, error) {
	out, err := git(src.Root, nil, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	if err != nil {
		return 0, err
	}
	n := 0
	seen := map[string]bool{}
	for _, name := range strings.Split(string(out), "\x00") {
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		from := filepath.Join(src.Root, filepath.FromSlash(name))
		fi, err := os.Lstat(from)
		if errors.Is(err, os.ErrNotExist) {
			continue // deleted, not yet committed
		} else if err != nil {
			return n, err
		}
		to := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return n, err
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			target, err := os.Readlink(from)
			if err != nil {
				return n, err
			}
			if err := os.Symlink(target, to); err != nil {
				return n, err
			}
		} else {
			data, err := os.ReadFile(from)
			if err != nil {
				return n, err
			}
			if err := os.WriteFile(to, data, fi.Mode().Perm()); err != nil {
				return n, err
			}
		}
		n++
	}
	return n, nil
}

func indent(s string) string {
	return "    " + strings.ReplaceAll(s, "\n", "\n    ")
}

// A lineWriter passes each line written to it to the function.
type lineWriter func(string)

func (w lineWriter) Write(p []byte) (int, error) {
	for _, line := range strings.Split(strings.TrimRight(string(p), "\n"), "\n") {
		w(line)
	}
	return len(p), nil
}
