package main

import (
	stdzip "archive/zip"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/mod/module"
	"golang.org/x/mod/sumdb/dirhash"
	"golang.org/x/mod/zip"
)

// vcsZip is the module zip of m at version, made from the repository's
// commit rev as the module proxy makes it from a tag: git archive's files,
// without those of nested modules, with the root's LICENSE in a nested
// module that has none.
func (ws *workspace) vcsZip(m repoModule, version, rev string) ([]byte, error) {
	var buf bytes.Buffer
	err := zip.CreateFromVCS(&buf, module.Version{Path: m.Path, Version: version}, ws.Root, rev, m.subdir())
	var unrecognized *zip.UnrecognizedVCSError
	if errors.As(err, &unrecognized) {
		return nil, fmt.Errorf("%w (the release tool needs a clone whose .git is a directory, not a linked worktree)", err)
	}
	return buf.Bytes(), err
}

// treeZip is the module zip of m at version as it would be made from the
// working tree once committed: the files git tracks or would add (not
// those it ignores) as they are on disk.
func (ws *workspace) treeZip(m repoModule, version string) ([]byte, error) {
	args := []string{"ls-files", "-z", "--cached", "--others", "--exclude-standard"}
	if m.Dir != "." {
		args = append(args, "--", m.Dir)
	}
	out, err := git(ws.Root, nil, args...)
	if err != nil {
		return nil, err
	}
	prefix := ""
	if m.Dir != "." {
		prefix = m.Dir + "/"
	}
	var files []zip.File
	seen := map[string]bool{}
	for _, name := range strings.Split(string(out), "\x00") {
		if name == "" || seen[name] || !strings.HasPrefix(name, prefix) {
			continue
		}
		seen[name] = true
		abs := filepath.Join(ws.Root, filepath.FromSlash(name))
		if _, err := os.Lstat(abs); errors.Is(err, os.ErrNotExist) {
			continue // deleted, not yet committed
		}
		files = append(files, diskFile{path: strings.TrimPrefix(name, prefix), abs: abs})
	}
	if prefix != "" && !seen[prefix+"LICENSE"] {
		// As the go command does for a module in a subdirectory.
		if abs := filepath.Join(ws.Root, "LICENSE"); fileExists(abs) {
			files = append(files, diskFile{path: "LICENSE", abs: abs})
		}
	}
	var buf bytes.Buffer
	err = zip.Create(&buf, module.Version{Path: m.Path, Version: version}, files)
	return buf.Bytes(), err
}

type diskFile struct{ path, abs string }

func (f diskFile) Path() string                 { return f.path }
func (f diskFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f diskFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }

func fileExists(name string) bool {
	_, err := os.Stat(name)
	return err == nil
}

// zipHash is the hash a go.sum line gives a module zip ("h1:…").
func zipHash(data []byte) (string, error) {
	zr, err := stdzip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return "", err
	}
	byName := map[string]*stdzip.File{}
	var names []string
	for _, f := range zr.File {
		if byName[f.Name] != nil {
			return "", fmt.Errorf("zip holds %s twice", f.Name)
		}
		byName[f.Name] = f
		names = append(names, f.Name)
	}
	return dirhash.Hash1(names, func(name string) (io.ReadCloser, error) { return byName[name].Open() })
}

// modHash is the hash a go.sum line gives a go.mod file ("h1:…").
func modHash(gomod []byte) (string, error) {
	return dirhash.Hash1([]string{"go.mod"}, func(string) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gomod)), nil
	})
}

// zipNames is the files of a module zip, without the "path@version/" prefix.
func zipNames(data []byte) ([]string, error) {
	zr, err := stdzip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return nil, err
	}
	var names []string
	for _, f := range zr.File {
		// "path@version/name": a module path holds no "@".
		_, rest, _ := strings.Cut(f.Name, "@")
		_, name, _ := strings.Cut(rest, "/")
		names = append(names, name)
	}
	sort.Strings(names)
	return names, nil
}

// A goSum is a go.sum file's lines.
type goSum struct {
	lines map[module.Version][]string // {path, "v1.2.3" or "v1.2.3/go.mod"} to hashes
}

func parseGoSum(data []byte) (goSum, error) {
	s := goSum{lines: map[module.Version][]string{}}
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(f) != 3 {
			return s, fmt.Errorf("go.sum line %d: %q is not 'path version hash'", i+1, line)
		}
		k := module.Version{Path: f[0], Version: f[1]}
		s.lines[k] = append(s.lines[k], f[2])
	}
	return s, nil
}

// set gives path at version the hashes of its zip and go.mod, in place of
// those it had.
func (s goSum) set(path, version, zipH, modH string) {
	s.lines[module.Version{Path: path, Version: version}] = []string{zipH}
	s.lines[module.Version{Path: path, Version: version + "/go.mod"}] = []string{modH}
}

// drop removes every line of path.
func (s goSum) drop(path string) {
	for k := range s.lines {
		if k.Path == path {
			delete(s.lines, k)
		}
	}
}

// of is the lines of path.
func (s goSum) of(path string) map[module.Version][]string {
	r := map[module.Version][]string{}
	for k, v := range s.lines {
		if k.Path == path {
			r[k] = v
		}
	}
	return r
}

// format writes the lines as the go command does: by module path, then
// version (a version's zip before its go.mod), hashes sorted.
func (s goSum) format() []byte {
	keys := make([]module.Version, 0, len(s.lines))
	for k := range s.lines {
		keys = append(keys, k)
	}
	module.Sort(keys)
	var b bytes.Buffer
	for _, k := range keys {
		hs := append([]string(nil), s.lines[k]...)
		sort.Strings(hs)
		for _, h := range hs {
			fmt.Fprintf(&b, "%s %s %s\n", k.Path, k.Version, h)
		}
	}
	return b.Bytes()
}
