package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/modfile"
)

// unreleased names the modules of go.work that a release does not tag, and
// why. Every other module of go.work is tagged, so that a new module is a
// decision: tag it, or say here why not.
var unreleased = map[string]string{
	"bench":         "compares dlm with other libraries; run from a clone (one of redsync's test dependencies is not served)",
	"tools/release": "this tool; run from a clone",
}

// A repoModule is one module of the repository, as go.work lists it.
type repoModule struct {
	Dir      string // slash-separated, relative to the repository's root: "." for the core
	Path     string // the module path
	Released bool   // tagged by a release
}

// subdir is the module's directory for git and x/mod/zip: "" for the root.
func (m repoModule) subdir() string {
	if m.Dir == "." {
		return ""
	}
	return m.Dir
}

// file is the slash path, from the repository's root, of name in m.
func (m repoModule) file(name string) string { return path.Join(m.Dir, name) }

// tag is the tag of m at version: "v1.2.3" for the core, "cmd/dlm/v1.2.3"
// for the module in cmd/dlm, as the go command looks them up.
func (m repoModule) tag(version string) string {
	if m.Dir == "." {
		return version
	}
	return m.Dir + "/" + version
}

// A workspace is the repository's modules: the core at the root and the
// nested modules go.work uses.
type workspace struct {
	Root    string       // absolute
	Core    repoModule   // the module at the root
	Modules []repoModule // every module, the core first, then by directory
}

// loadWorkspace reads go.work and the go.mod of each module it uses from
// the working tree of the repository at root.
func loadWorkspace(root string) (*workspace, error) {
	root, err := filepath.Abs(root)
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	ws := &workspace{Root: root}
	for _, u := range wf.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		if path.IsAbs(dir) || dir == ".." || strings.HasPrefix(dir, "../") {
			return nil, fmt.Errorf("go.work: use %s is outside the repository", u.Path)
		}
		gomod, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(dir), "go.mod"))
		if err != nil {
			return nil, err
		}
		p := modfile.ModulePath(gomod)
		if p == "" {
			return nil, fmt.Errorf("%s/go.mod: no module line", dir)
		}
		_, skip := unreleased[dir]
		m := repoModule{Dir: dir, Path: p, Released: !skip}
		if dir == "." {
			ws.Core = m
		}
		ws.Modules = append(ws.Modules, m)
	}
	if ws.Core.Path == "" {
		return nil, errors.New("go.work does not use the repository's root")
	}
	for _, m := range ws.Modules {
		if m.Dir != "." && m.Path != ws.Core.Path+"/"+m.Dir {
			return nil, fmt.Errorf("%s/go.mod: module %s, want %s/%s (the go command finds a nested module's tags by its directory)", m.Dir, m.Path, ws.Core.Path, m.Dir)
		}
	}
	for dir := range unreleased {
		if _, ok := ws.byDir(dir); !ok {
			return nil, fmt.Errorf("the release tool lists %s as unreleased, but go.work does not use it", dir)
		}
	}
	sort.SliceStable(ws.Modules, func(i, j int) bool {
		a, b := ws.Modules[i], ws.Modules[j]
		if (a.Dir == ".") != (b.Dir == ".") {
			return a.Dir == "."
		}
		return a.Dir < b.Dir
	})
	return ws, nil
}

func (ws *workspace) byPath(p string) (repoModule, bool) {
	for _, m := range ws.Modules {
		if m.Path == p {
			return m, true
		}
	}
	return repoModule{}, false
}

func (ws *workspace) byDir(dir string) (repoModule, bool) {
	for _, m := range ws.Modules {
		if m.Dir == dir {
			return m, true
		}
	}
	return repoModule{}, false
}

// released is the modules a release tags.
func (ws *workspace) released() []repoModule {
	var r []repoModule
	for _, m := range ws.Modules {
		if m.Released {
			r = append(r, m)
		}
	}
	return r
}

// A source reads the repository's files: its working tree, or a commit.
type source interface {
	read(name string) ([]byte, error) // name is slash-separated from the root; a missing file's error matches os.ErrNotExist
}

type worktree string

func (w worktree) read(name string) ([]byte, error) {
	return os.ReadFile(filepath.Join(string(w), filepath.FromSlash(name)))
}

// A commit reads files as they are at a revision.
type commit struct {
	root, rev string
}

func (c commit) read(name string) ([]byte, error) {
	// ls-tree tells a missing file from git's other failures.
	out, err := git(c.root, nil, "ls-tree", "--name-only", c.rev, "--", name)
	if err != nil {
		return nil, err
	}
	if strings.TrimSpace(string(out)) == "" {
		return nil, fmt.Errorf("%s at %s: %w", name, c.rev, os.ErrNotExist)
	}
	return git(c.root, nil, "show", c.rev+":"+name)
}

// goMod parses m's go.mod from src.
func goMod(src source, m repoModule) (*modfile.File, error) {
	data, err := src.read(m.file("go.mod"))
	if err != nil {
		return nil, err
	}
	return modfile.Parse(m.file("go.mod"), data, nil)
}

// ownRequires is the requirements of f on the repository's own modules.
func (ws *workspace) ownRequires(f *modfile.File) []*modfile.Require {
	var r []*modfile.Require
	for _, req := range f.Require {
		if _, ok := ws.byPath(req.Mod.Path); ok {
			r = append(r, req)
		}
	}
	return r
}

// ordered is the modules with each after those of the repository it
// requires (as src's go.mod files say), so that a module's go.sum can hold
// the hashes of what it requires.
func (ws *workspace) ordered(src source) ([]repoModule, error) {
	deps := map[string][]string{}
	for _, m := range ws.Modules {
		f, err := goMod(src, m)
		if err != nil {
			return nil, err
		}
		for _, req := range ws.ownRequires(f) {
			deps[m.Path] = append(deps[m.Path], req.Mod.Path)
		}
	}
	var out []repoModule
	state := map[string]int{} // 1 visiting, 2 done
	var visit func(m repoModule) error
	visit = func(m repoModule) error {
		switch state[m.Path] {
		case 1:
			return fmt.Errorf("%s requires itself through the repository's modules", m.Path)
		case 2:
			return nil
		}
		state[m.Path] = 1
		for _, d := range deps[m.Path] {
			dm, _ := ws.byPath(d)
			if err := visit(dm); err != nil {
				return err
			}
		}
		state[m.Path] = 2
		out = append(out, m)
		return nil
	}
	for _, m := range ws.Modules {
		if err := visit(m); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// git runs git in dir with env added to the process's, and returns its
// standard output.
func git(dir string, env []string, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(stderr.Bytes()))
	}
	return stdout.Bytes(), nil
}

// repoRoot is the root of the git working tree around dir.
func repoRoot(dir string) (string, error) {
	out, err := git(dir, nil, "rev-parse", "--show-toplevel")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(out)), nil
}
