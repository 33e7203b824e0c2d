// Command release releases the modules of the dlm repository together, and
// rehearses a release.
//
// The repository holds one module at its root (github.com/dlmgo/dlm) and
// nested modules that require it (cmd/dlm, dlmotel, faults, fencing/pgtest,
// bench, and this tool). A release tags every module but bench and this
// tool at one commit, in which each module requires the repository's
// others at the version released, with the go.sum lines for them, and
// without replace directives (go install refuses a module that has them).
// go.work replaces those versions by the directories, so that a clone
// builds what it holds.
//
// Usage, from the repository's root:
//
//	go run ./tools/release VERSION
//		On a clean working tree: write the requirements at VERSION, commit,
//		tag VERSION, cmd/dlm/VERSION, dlmotel/VERSION, faults/VERSION and
//		fencing/pgtest/VERSION, and check them. Nothing is pushed.
//	go run ./tools/release check VERSION
//		Check a release at HEAD: its tags, go.mod, go.sum and go.work.
//	go run ./tools/release rehearse [VERSION]
//		Release a copy of the working tree as VERSION (default v0.1.0) into a
//		module proxy on the file system, then install cmd/dlm@VERSION and
//		build a program that uses dlmotel@VERSION from it, outside the
//		workspace and with an empty module cache. CI does it as a test
//		(TestRehearsal).
//	go run ./tools/release go DIR ARGS...
//		Run `go ARGS...` in the module at DIR outside the workspace, with the
//		repository's modules served from the working tree: for `go mod tidy`
//		and `go get` in a nested repoModule, which ignore go.work.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"
)

func main() {
	flag.Usage = func() {
		fmt.Fprint(os.Stderr, `usage:
	release VERSION              prepare, commit, tag and check a release
	release check VERSION        check the release at HEAD
	release rehearse [VERSION]   rehearse a release of the working tree through a file-system module proxy
	release go DIR ARGS...       run go ARGS in the module at DIR, outside the workspace
`)
		flag.PrintDefaults()
	}
	dir := flag.String("C", ".", "a directory in the repository")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		flag.Usage()
		os.Exit(2)
	}
	root, err := repoRoot(*dir)
	if err != nil {
		fatal(err)
	}
	switch args[0] {
	case "check":
		if len(args) != 2 {
			flag.Usage()
			os.Exit(2)
		}
		ws, err := loadWorkspace(root)
		if err != nil {
			fatal(err)
		}
		if err := check(ws, args[1], os.Stdout); err != nil {
			fatal(err)
		}
	case "rehearse":
		version := "v0.1.0"
		if len(args) > 2 {
			flag.Usage()
			os.Exit(2)
		} else if len(args) == 2 {
			version = args[1]
		}
		tmp, err := os.MkdirTemp("", "dlm-rehearsal-")
		if err != nil {
			fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		err = rehearse(ctx, root, version, tmp, os.Stdout)
		cancel()
		os.RemoveAll(tmp)
		if err != nil {
			fatal(err)
		}
	case "go":
		if len(args) < 3 {
			flag.Usage()
			os.Exit(2)
		}
		ws, err := loadWorkspace(root)
		if err != nil {
			fatal(err)
		}
		if err := goOutside(ws, args[1], args[2:]); err != nil {
			fatal(err)
		}
	default:
		if len(args) != 1 {
			flag.Usage()
			os.Exit(2)
		}
		ws, err := loadWorkspace(root)
		if err != nil {
			fatal(err)
		}
		if err := release(ws, args[0], nil, os.Stdout); err != nil {
			fatal(err)
		}
		fmt.Println("release: push the commit and the tags when you are ready: git push origin HEAD", tagList(ws, args[0]))
	}
}

func tagList(ws *workspace, version string) string {
	s := ""
	for i, t := range tags(ws, version) {
		if i > 0 {
			s += " "
		}
		s += t
	}
	return s
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}
