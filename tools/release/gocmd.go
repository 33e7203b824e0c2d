package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	"golang.org/x/mod/module"
)

// goOutside runs `go args...` in the module at dir (relative to the
// repository's root) as it runs outside the workspace (GOWORK=off), with
// the repository's modules served from the working tree at the versions
// the go.mod files require. That is what `go mod tidy` and `go get` need
// in a nested module: they ignore go.work, and would otherwise fetch the
// core at a version that is not published yet, or that lacks what the
// working tree added. The go.sum lines of the repository's modules are
// put back as they were: a release writes them (prepare).
func goOutside(ws *workspace, dir string, args []string) error {
	m, ok := ws.byDir(filepath.ToSlash(filepath.Clean(dir)))
	if !ok {
		return fmt.Errorf("%s is not a module of go.work", dir)
	}
	tmp, err := os.MkdirTemp("", "dlm-release-go-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)

	src := worktree(ws.Root)
	var mods []proxyModule
	served := map[[2]string]bool{}
	for _, mm := range ws.Modules {
		f, err := goMod(src, mm)
		if err != nil {
			return err
		}
		for _, req := range ws.ownRequires(f) {
			key := [2]string{req.Mod.Path, req.Mod.Version}
			if served[key] {
				continue
			}
			served[key] = true
			dep, _ := ws.byPath(req.Mod.Path)
			z, err := ws.treeZip(dep, req.Mod.Version)
			if err != nil {
				return err
			}
			gomod, err := src.read(dep.file("go.mod"))
			if err != nil {
				return err
			}
			mods = append(mods, proxyModule{Path: dep.Path, Version: req.Mod.Version, Mod: gomod, Zip: z, Time: time.Now()})
		}
	}
	proxyDir := filepath.Join(tmp, "proxy")
	if err := writeProxy(proxyDir, mods); err != nil {
		return err
	}
	env, err := isolatedEnv(proxyDir, filepath.Join(tmp, "modcache"), os.Getenv("GOBIN"), ws.Core.Path)
	if err != nil {
		return err
	}

	sumName := filepath.Join(ws.Root, filepath.FromSlash(m.file("go.sum")))
	before, err := os.ReadFile(sumName)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	sum, err := parseGoSum(before)
	if err != nil {
		return err
	}
	kept := goSum{lines: map[module.Version][]string{}}
	for _, own := range ws.Modules {
		for k, v := range sum.of(own.Path) {
			kept.lines[k] = v
		}
		sum.drop(own.Path)
	}
	if len(before) > 0 {
		if err := os.WriteFile(sumName, sum.format(), 0o644); err != nil {
			return err
		}
	}

	cmd := exec.Command("go", args...)
	cmd.Dir = filepath.Join(ws.Root, filepath.FromSlash(m.Dir))
	cmd.Env = env
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	runErr := cmd.Run()

	// Put the repository's lines back as they were.
	after, err := os.ReadFile(sumName)
	if errors.Is(err, os.ErrNotExist) && len(kept.lines) == 0 {
		return runErr
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return errors.Join(runErr, err)
	}
	sum, err = parseGoSum(after)
	if err != nil {
		return errors.Join(runErr, err)
	}
	for _, own := range ws.Modules {
		sum.drop(own.Path)
	}
	for k, v := range kept.lines {
		sum.lines[k] = v
	}
	if err := os.WriteFile(sumName, sum.format(), 0o644); err != nil {
		return errors.Join(runErr, err)
	}
	return runErr
}
