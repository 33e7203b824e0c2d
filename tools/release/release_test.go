package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/modfile"
)

// A small repository shaped like dlm's: the core, a nested module that
// requires it, one that requires both, and the two modules a release does
// not tag.
var fixture = map[string]string{
	"LICENSE": "the license\n",
	"go.mod":  "module github.com/dlmgo/dlm\n\ngo 1.26.0\n",
	"dlm.go":  "package dlm\n",
	"go.work": "// A comment the release keeps.\n\ngo 1.26.0\n\nuse (\n\t.\n\t./bench\n\t./sub\n\t./sub2\n\t./tools/release\n)\n\nreplace github.com/dlmgo/dlm v0.0.1 => ./\n",
	"sub/go.mod": "module github.com/dlmgo/dlm/sub\n\ngo 1.26.0\n\nreplace github.com/dlmgo/dlm => ../\n\n" +
		"require (\n\tgithub.com/dlmgo/dlm v0.0.0-00010101000000-000000000000\n\tgolang.org/x/sys v0.48.0\n)\n",
	"sub/go.sum": "golang.org/x/sys v0.48.0 h1:AAAA=\ngolang.org/x/sys v0.48.0/go.mod h1:BBBB=\n",
	"sub/sub.go": "package sub\n",
	"sub2/go.mod": "module github.com/dlmgo/dlm/sub2\n\ngo 1.26.0\n\n" +
		"require (\n\tgithub.com/dlmgo/dlm v0.0.1\n\tgithub.com/dlmgo/dlm/sub v0.0.1\n)\n",
	"sub2/sub2.go":          "package sub2\n",
	"bench/go.mod":          "module github.com/dlmgo/dlm/bench\n\ngo 1.26.0\n\nrequire github.com/dlmgo/dlm v0.0.1\n",
	"tools/release/go.mod":  "module github.com/dlmgo/dlm/tools/release\n\ngo 1.26.0\n",
	"tools/release/main.go": "package main\n",
}

func newFixture(t *testing.T) *workspace {
	t.Helper()
	root := t.TempDir()
	for name, data := range fixture {
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitT(t, root, "init", "-q")
	gitT(t, root, "add", "-A")
	gitT(t, root, "commit", "-q", "-m", "fixture")
	ws, err := loadWorkspace(root)
	if err != nil {
		t.Fatal(err)
	}
	return ws
}

func gitT(t *testing.T, dir string, args ...string) string {
	t.Helper()
	out, err := git(dir, gitIdentity, args...)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(out))
}

func readT(t *testing.T, ws *workspace, name string) string {
	t.Helper()
	data, err := worktree(ws.Root).read(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

func TestReleaseWritesTagsAndChecks(t *testing.T) {
	ws := newFixture(t)
	var log bytes.Buffer
	if err := release(ws, "v0.3.0", gitIdentity, &log); err != nil {
		t.Fatalf("release: %v\n%s", err, log.String())
	}
	t.Log(log.String())

	head := gitT(t, ws.Root, "rev-parse", "HEAD")
	for _, tag := range []string{"v0.3.0", "sub/v0.3.0", "sub2/v0.3.0"} {
		if got := gitT(t, ws.Root, "rev-parse", tag+"^{commit}"); got != head {
			t.Errorf("tag %s at %s, want HEAD %s", tag, got, head)
		}
	}
	for _, tag := range []string{"bench/v0.3.0", "tools/release/v0.3.0"} {
		if _, err := git(ws.Root, nil, "rev-parse", "--verify", "--quiet", "refs/tags/"+tag); err == nil {
			t.Errorf("tag %s was made; the module is not released", tag)
		}
	}
	if st := gitT(t, ws.Root, "status", "--porcelain"); st != "" {
		t.Errorf("the release left changes uncommitted:\n%s", st)
	}

	sub, err := modfile.Parse("sub/go.mod", []byte(readT(t, ws, "sub/go.mod")), nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(sub.Replace) != 0 {
		t.Errorf("sub/go.mod keeps %d replace directives", len(sub.Replace))
	}
	for _, want := range []string{"github.com/dlmgo/dlm v0.3.0\n", "golang.org/x/sys v0.48.0\n"} {
		if !strings.Contains(readT(t, ws, "sub/go.mod"), want) {
			t.Errorf("sub/go.mod lacks %q:\n%s", want, readT(t, ws, "sub/go.mod"))
		}
	}
	sum := readT(t, ws, "sub/go.sum")
	for _, want := range []string{"github.com/dlmgo/dlm v0.3.0 h1:", "github.com/dlmgo/dlm v0.3.0/go.mod h1:", "golang.org/x/sys v0.48.0 h1:AAAA="} {
		if !strings.Contains(sum, want) {
			t.Errorf("sub/go.sum lacks %q:\n%s", want, sum)
		}
	}
	if sum2 := readT(t, ws, "sub2/go.sum"); !strings.Contains(sum2, "github.com/dlmgo/dlm/sub v0.3.0 h1:") || !strings.Contains(sum2, "github.com/dlmgo/dlm v0.3.0 h1:") {
		t.Errorf("sub2/go.sum lacks its requirements:\n%s", sum2)
	}
	if !strings.Contains(readT(t, ws, "bench/go.mod"), "github.com/dlmgo/dlm v0.3.0\n") {
		t.Errorf("bench/go.mod does not require the released core:\n%s", readT(t, ws, "bench/go.mod"))
	}
	work := readT(t, ws, "go.work")
	for _, want := range []string{"github.com/dlmgo/dlm v0.3.0 => ./", "github.com/dlmgo/dlm/sub v0.3.0 => ./sub"} {
		if !strings.Contains(work, want) {
			t.Errorf("go.work lacks %q:\n%s", want, work)
		}
	}
	if !strings.HasPrefix(work, "// A comment the release keeps.\n") {
		t.Errorf("go.work lost its comment:\n%s", work)
	}
	if strings.Contains(work, "v0.0.1") {
		t.Errorf("go.work keeps the old version's replacement:\n%s", work)
	}

	// A second release on top: only versions change.
	if err := release(ws, "v0.4.0", gitIdentity, &log); err != nil {
		t.Fatalf("second release: %v", err)
	}
	if strings.Contains(readT(t, ws, "sub2/go.sum"), "v0.3.0") {
		t.Errorf("sub2/go.sum keeps lines of v0.3.0:\n%s", readT(t, ws, "sub2/go.sum"))
	}
}

func TestReleaseRefuses(t *testing.T) {
	ws := newFixture(t)
	for _, v := range []string{"0.3.0", "v0.3", "v2.0.0", "v0.0.0-20260101000000-abcdefabcdef", "v0.3.0+meta"} {
		if err := release(ws, v, gitIdentity, &bytes.Buffer{}); err == nil {
			t.Errorf("release %s was accepted", v)
		}
	}
	if err := os.WriteFile(filepath.Join(ws.Root, "new.go"), []byte("package dlm\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := release(ws, "v0.3.0", gitIdentity, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "working tree") {
		t.Errorf("release in a dirty working tree: %v", err)
	}
	gitT(t, ws.Root, "add", "-A")
	gitT(t, ws.Root, "commit", "-q", "-m", "new")
	gitT(t, ws.Root, "tag", "sub/v0.3.0")
	if err := release(ws, "v0.3.0", gitIdentity, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "exists") {
		t.Errorf("release over an existing tag: %v", err)
	}
}

// check finds what a release must not have.
func TestCheckCatches(t *testing.T) {
	for _, c := range []struct {
		name  string
		spoil func(t *testing.T, ws *workspace)
		want  string
	}{
		{"a replace directive", func(t *testing.T, ws *workspace) {
			appendFile(t, ws, "sub2/go.mod", "\nreplace github.com/dlmgo/dlm/sub => ../sub\n")
		}, "replace github.com/dlmgo/dlm/sub"},
		{"a pseudo-version", func(t *testing.T, ws *workspace) {
			appendFile(t, ws, "bench/go.mod", "\nrequire example.com/x v0.0.0-20260101000000-abcdefabcdef\n")
		}, "pseudo-version"},
		{"a requirement at another version", func(t *testing.T, ws *workspace) {
			replaceInFile(t, ws, "sub2/go.mod", "github.com/dlmgo/dlm/sub v0.3.0", "github.com/dlmgo/dlm/sub v0.2.0")
		}, "requires github.com/dlmgo/dlm/sub v0.2.0, want v0.3.0"},
		{"a stale go.sum line", func(t *testing.T, ws *workspace) {
			appendFile(t, ws, "dlm.go", "\n// changed after the hashes were written\n")
		}, "sub/go.sum: github.com/dlmgo/dlm v0.3.0 h1:"},
		{"a missing go.sum line", func(t *testing.T, ws *workspace) {
			sum := readT(t, ws, "sub2/go.sum")
			var kept []string
			for _, l := range strings.SplitAfter(sum, "\n") {
				if !strings.HasPrefix(l, "github.com/dlmgo/dlm/sub v0.3.0/go.mod") {
					kept = append(kept, l)
				}
			}
			writeFile(t, ws, "sub2/go.sum", strings.Join(kept, ""))
		}, "sub2/go.sum: no line github.com/dlmgo/dlm/sub v0.3.0/go.mod"},
		{"go.work without the replacement", func(t *testing.T, ws *workspace) {
			replaceInFile(t, ws, "go.work", "replace github.com/dlmgo/dlm/sub v0.3.0 => ./sub", "")
		}, "go.work: no replace github.com/dlmgo/dlm/sub v0.3.0"},
		{"a module requiring bench", func(t *testing.T, ws *workspace) {
			appendFile(t, ws, "sub2/go.mod", "\nrequire github.com/dlmgo/dlm/bench v0.3.0\n")
		}, "which a release does not tag"},
	} {
		t.Run(c.name, func(t *testing.T) {
			ws := newFixture(t)
			if err := release(ws, "v0.3.0", gitIdentity, &bytes.Buffer{}); err != nil {
				t.Fatal(err)
			}
			c.spoil(t, ws)
			gitT(t, ws.Root, "commit", "-q", "-am", "spoiled")
			for _, m := range ws.released() {
				gitT(t, ws.Root, "tag", "-f", "-a", "-m", "moved", m.tag("v0.3.0"))
			}
			err := check(ws, "v0.3.0", &bytes.Buffer{})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("check: %v, want an error with %q", err, c.want)
			}
		})
	}
	t.Run("a tag at another commit", func(t *testing.T) {
		ws := newFixture(t)
		if err := release(ws, "v0.3.0", gitIdentity, &bytes.Buffer{}); err != nil {
			t.Fatal(err)
		}
		gitT(t, ws.Root, "commit", "-q", "--allow-empty", "-m", "after")
		err := check(ws, "v0.3.0", &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), "not at HEAD") {
			t.Fatalf("check: %v, want tags not at HEAD", err)
		}
	})
}

func appendFile(t *testing.T, ws *workspace, name, text string) {
	t.Helper()
	writeFile(t, ws, name, readT(t, ws, name)+text)
}

func replaceInFile(t *testing.T, ws *workspace, name, old, new string) {
	t.Helper()
	s := readT(t, ws, name)
	if !strings.Contains(s, old) {
		t.Fatalf("%s has no %q:\n%s", name, old, s)
	}
	writeFile(t, ws, name, strings.Replace(s, old, new, 1))
}

func writeFile(t *testing.T, ws *workspace, name, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(ws.Root, filepath.FromSlash(name)), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

// go.sum files come back from parseGoSum and format as the go command
// wrote them.
func TestGoSumRoundTrip(t *testing.T) {
	root, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"go.sum", "cmd/dlm/go.sum", "dlmotel/go.sum", "bench/go.sum"} {
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			t.Fatal(err)
		}
		s, err := parseGoSum(data)
		if err != nil {
			t.Fatal(err)
		}
		if got := s.format(); !bytes.Equal(got, data) {
			t.Errorf("%s formatted differs from the go command's:\n%s", name, got)
		}
	}
}

// The release rehearsal: the repository's working tree released into a
// module proxy on the file system, then installed and used from there as
// a stranger would, outside the workspace and with an empty module cache.
// Public modules come from the module proxy (go env GOPROXY), through the
// local module cache's downloads when they are there.
func TestRehearsal(t *testing.T) {
	if testing.Short() {
		t.Skip("the rehearsal builds cmd/dlm from a new module cache: not with -short")
	}
	root, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	// A cold build cache costs minutes of compiling (docs/development.md).
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	start := time.Now()
	log := lineWriter(func(line string) { t.Log(line) })
	if err := rehearse(ctx, root, "v0.1.0", t.TempDir(), log); err != nil {
		t.Fatal(err)
	}
	t.Logf("rehearsal: %v", time.Since(start).Round(time.Second))
}
