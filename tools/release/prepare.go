package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// checkVersion refuses what cannot be a release of these modules: a
// non-canonical semantic version, a pseudo-version, build metadata, or a
// major version the module paths (no /vN suffix) do not allow.
func checkVersion(ws *workspace, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q: want a canonical semantic version such as v0.1.0", version)
	}
	if module.IsPseudoVersion(version) {
		return fmt.Errorf("version %s is a pseudo-version", version)
	}
	for _, m := range ws.Modules {
		if err := module.Check(m.Path, version); err != nil {
			return err
		}
	}
	return nil
}

// prepare writes the release of version into the working tree: every
// module's requirements on the repository's modules at version, without
// replace directives for them, and the go.sum lines of those requirements
// (hashes of the modules as they will be committed); and go.work's
// replacements of those versions by the directories, for development. It
// returns the files it changed.
func prepare(ws *workspace, version string) ([]string, error) {
	if err := checkVersion(ws, version); err != nil {
		return nil, err
	}
	src := worktree(ws.Root)
	order, err := ws.ordered(src)
	if err != nil {
		return nil, err
	}
	var changed []string
	write := func(name string, data []byte) error {
		abs := filepath.Join(ws.Root, filepath.FromSlash(name))
		old, err := os.ReadFile(abs)
		if err == nil && bytes.Equal(old, data) {
			return nil
		}
		changed = append(changed, name)
		return os.WriteFile(abs, data, 0o644)
	}
	// go.work first: it is a file of the core's zip, whose hash the
	// go.sum files hold.
	required := map[string]bool{} // module paths some module requires
	for _, m := range ws.Modules {
		f, err := goMod(src, m)
		if err != nil {
			return nil, err
		}
		for _, req := range ws.ownRequires(f) {
			required[req.Mod.Path] = true
		}
	}
	data, err := src.read("go.work")
	if err != nil {
		return nil, err
	}
	wf, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, err
	}
	for _, r := range slices.Clone(wf.Replace) {
		if _, own := ws.byPath(r.Old.Path); own {
			if err := wf.DropReplace(r.Old.Path, r.Old.Version); err != nil {
				return nil, err
			}
		}
	}
	for _, m := range ws.Modules {
		if required[m.Path] {
			if err := wf.AddReplace(m.Path, version, workDir(m), ""); err != nil {
				return nil, err
			}
		}
	}
	wf.Cleanup()
	if err := write("go.work", modfile.Format(wf.Syntax)); err != nil {
		return nil, err
	}
	for _, m := range order {
		f, err := goMod(src, m)
		if err != nil {
			return nil, err
		}
		for _, r := range slices.Clone(f.Replace) {
			if _, own := ws.byPath(r.Old.Path); own {
				if err := f.DropReplace(r.Old.Path, r.Old.Version); err != nil {
					return nil, err
				}
			}
		}
		reqs := ws.ownRequires(f)
		for _, req := range reqs {
			if err := f.AddRequire(req.Mod.Path, version); err != nil {
				return nil, err
			}
		}
		f.Cleanup()
		if err := write(m.file("go.mod"), modfile.Format(f.Syntax)); err != nil {
			return nil, err
		}
		if len(reqs) == 0 {
			continue
		}
		sumData, err := src.read(m.file("go.sum"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
		sum, err := parseGoSum(sumData)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", m.file("go.sum"), err)
		}
		for _, req := range reqs {
			dep, _ := ws.byPath(req.Mod.Path)
			// dep comes before m in order: its files are final.
			z, err := ws.treeZip(dep, version)
			if err != nil {
				return nil, err
			}
			gomod, err := src.read(dep.file("go.mod"))
			if err != nil {
				return nil, err
			}
			zh, err := zipHash(z)
			if err != nil {
				return nil, err
			}
			mh, err := modHash(gomod)
			if err != nil {
				return nil, err
			}
			sum.drop(dep.Path)
			sum.set(dep.Path, version, zh, mh)
		}
		if err := write(m.file("go.sum"), sum.format()); err != nil {
			return nil, err
		}
	}

	return changed, nil
}

// workDir is m's directory as go.work names it.
func workDir(m repoModule) string {
	if m.Dir == "." {
		return "./"
	}
	return "./" + m.Dir
}

// gitIdentity is the identity the rehearsal commits and tags with.
var gitIdentity = []string{
	"GIT_AUTHOR_NAME=dlm release rehearsal", "GIT_AUTHOR_EMAIL=rehearsal@invalid",
	"GIT_COMMITTER_NAME=dlm release rehearsal", "GIT_COMMITTER_EMAIL=rehearsal@invalid",
}

// release prepares version in a clean working tree, commits it and tags
// every released module at that commit, then checks what it made. env is
// added to git's environment. The commit is made even when prepare
// changed nothing, so that the release has a commit of its own.
func release(ws *workspace, version string, env []string, log io.Writer) error {
	if out, err := git(ws.Root, nil, "status", "--porcelain"); err != nil {
		return err
	} else if len(out) > 0 {
		return fmt.Errorf("the working tree has changes; commit or stash them first:\n%s", out)
	}
	for _, m := range ws.released() {
		if _, err := git(ws.Root, nil, "rev-parse", "--verify", "--quiet", "refs/tags/"+m.tag(version)); err == nil {
			return fmt.Errorf("tag %s exists already", m.tag(version))
		}
	}
	changed, err := prepare(ws, version)
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "release: wrote %s\n", strings.Join(changed, ", "))
	if len(changed) > 0 {
		if _, err := git(ws.Root, env, append([]string{"add", "--"}, changed...)...); err != nil {
			return err
		}
	}
	msg := fmt.Sprintf("release %s: every module requires the repository's others at %s\n\nTags: %s", version, version, strings.Join(tags(ws, version), " "))
	if _, err := git(ws.Root, env, "commit", "-q", "--allow-empty", "-m", msg); err != nil {
		return err
	}
	for _, m := range ws.released() {
		if _, err := git(ws.Root, env, "tag", "-a", m.tag(version), "-m", m.Path+" "+version); err != nil {
			return err
		}
	}
	head, err := git(ws.Root, nil, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	fmt.Fprintf(log, "release: commit %s, tags %s\n", strings.TrimSpace(string(head)), strings.Join(tags(ws, version), " "))
	return check(ws, version, log)
}

func tags(ws *workspace, version string) []string {
	var t []string
	for _, m := range ws.released() {
		t = append(t, m.tag(version))
	}
	return t
}

// check checks a release of version at HEAD: every released module's tag
// points at HEAD; no module's go.mod has a replace directive or a
// pseudo-version; each requires the repository's released modules at
// version, with go.sum lines that match the zips the module proxy will
// make from the tags; every released module's zip has a LICENSE; and
// go.work replaces the required versions by their directories.
func check(ws *workspace, version string, log io.Writer) error {
	if err := checkVersion(ws, version); err != nil {
		return err
	}
	out, err := git(ws.Root, nil, "rev-parse", "HEAD")
	if err != nil {
		return err
	}
	head := strings.TrimSpace(string(out))
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	for _, m := range ws.released() {
		out, err := git(ws.Root, nil, "rev-parse", "--verify", "refs/tags/"+m.tag(version)+"^{commit}")
		switch {
		case err != nil:
			fail("tag %s: missing", m.tag(version))
		case strings.TrimSpace(string(out)) != head:
			fail("tag %s points at %s, not at HEAD (%s)", m.tag(version), strings.TrimSpace(string(out)), head)
		}
	}
	src := commit{root: ws.Root, rev: head}
	zips := map[string][]byte{}
	zipOf := func(m repoModule) ([]byte, error) {
		if z, ok := zips[m.Path]; ok {
			return z, nil
		}
		z, err := ws.vcsZip(m, version, head)
		zips[m.Path] = z
		return z, err
	}
	for _, m := range ws.Modules {
		f, err := goMod(src, m)
		if err != nil {
			fail("%v", err)
			continue
		}
		for _, r := range f.Replace {
			fail("%s: replace %s => %s (go install refuses a module with replace directives; users ignore them)", m.file("go.mod"), r.Old.Path, r.New.Path)
		}
		for _, req := range f.Require {
			if module.IsPseudoVersion(req.Mod.Version) {
				fail("%s: requires %s at the pseudo-version %s", m.file("go.mod"), req.Mod.Path, req.Mod.Version)
			}
		}
		reqs := ws.ownRequires(f)
		if len(reqs) == 0 {
			continue
		}
		sumData, err := src.read(m.file("go.sum"))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			fail("%v", err)
			continue
		}
		sum, err := parseGoSum(sumData)
		if err != nil {
			fail("%s: %v", m.file("go.sum"), err)
			continue
		}
		for _, req := range reqs {
			dep, _ := ws.byPath(req.Mod.Path)
			if req.Mod.Version != version {
				fail("%s: requires %s %s, want %s", m.file("go.mod"), dep.Path, req.Mod.Version, version)
				continue
			}
			if !dep.Released {
				fail("%s: requires %s, which a release does not tag", m.file("go.mod"), dep.Path)
				continue
			}
			z, err := zipOf(dep)
			if err != nil {
				fail("%v", err)
				continue
			}
			zh, err := zipHash(z)
			if err != nil {
				fail("%v", err)
				continue
			}
			gomod, err := src.read(dep.file("go.mod"))
			if err != nil {
				fail("%v", err)
				continue
			}
			mh, err := modHash(gomod)
			if err != nil {
				fail("%v", err)
				continue
			}
			want := map[module.Version][]string{
				{Path: dep.Path, Version: version}:             {zh},
				{Path: dep.Path, Version: version + "/go.mod"}: {mh},
			}
			for k, hs := range sum.of(dep.Path) {
				if w, ok := want[k]; !ok || !slices.Equal(hs, w) {
					fail("%s: %s %s %s, want %s", m.file("go.sum"), k.Path, k.Version, strings.Join(hs, " "), strings.Join(want[k], " "))
				}
			}
			for k, w := range want {
				if _, ok := sum.lines[k]; !ok {
					fail("%s: no line %s %s %s", m.file("go.sum"), k.Path, k.Version, w[0])
				}
			}
		}
	}
	for _, m := range ws.released() {
		z, err := zipOf(m)
		if err != nil {
			fail("%v", err)
			continue
		}
		names, err := zipNames(z)
		if err != nil {
			fail("%v", err)
			continue
		}
		if !slices.Contains(names, "LICENSE") {
			fail("%s's zip at %s has no LICENSE: pkg.go.dev would show neither its docs nor its README", m.Path, version)
		}
		fmt.Fprintf(log, "check: %s %s: %d files in its zip\n", m.Path, version, len(names))
	}
	data, err := src.read("go.work")
	if err != nil {
		fail("%v", err)
	} else if wf, err := modfile.ParseWork("go.work", data, nil); err != nil {
		fail("%v", err)
	} else {
		required := map[string]bool{}
		for _, m := range ws.Modules {
			if f, err := goMod(src, m); err == nil {
				for _, req := range ws.ownRequires(f) {
					required[req.Mod.Path] = true
				}
			}
		}
		for _, m := range ws.Modules {
			if !required[m.Path] {
				continue
			}
			ok := false
			for _, r := range wf.Replace {
				if r.Old.Path == m.Path && r.Old.Version == version && r.New.Version == "" && strings.TrimSuffix(r.New.Path, "/") == strings.TrimSuffix(workDir(m), "/") {
					ok = true
				}
			}
			if !ok {
				fail("go.work: no replace %s %s => %s (development builds the module in the clone)", m.Path, version, workDir(m))
			}
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	fmt.Fprintf(log, "check: %s at %s: tags, go.mod, go.sum and go.work as a release needs them\n", version, head)
	return nil
}
