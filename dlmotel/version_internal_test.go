package dlmotel

import (
	"runtime/debug"
	"testing"
)

// The scope's version is this module's, as the build information gives
// it: the dependency's version in a program that requires dlmotel, none
// for a checkout's "(devel)" or a directory that replaces the module.
func TestVersionIn(t *testing.T) {
	mod := func(path, version string, replace *debug.Module) *debug.Module {
		return &debug.Module{Path: path, Version: version, Replace: replace}
	}
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		want string
	}{
		{"no build information", nil, ""},
		{"a dependency", &debug.BuildInfo{Main: *mod("example.com/app", "(devel)", nil), Deps: []*debug.Module{
			mod("github.com/dlmgo/dlm", "v0.1.0", nil), mod(ScopeName, "v0.1.0", nil),
		}}, "v0.1.0"},
		{"a pseudo-version", &debug.BuildInfo{Deps: []*debug.Module{mod(ScopeName, "v0.1.1-0.20261207120000-6f71506abcde", nil)}}, "v0.1.1-0.20261207120000-6f71506abcde"},
		{"the main module, from a checkout", &debug.BuildInfo{Main: *mod(ScopeName, "(devel)", nil)}, ""},
		{"replaced by a directory", &debug.BuildInfo{Deps: []*debug.Module{mod(ScopeName, "v0.1.0", mod("../dlmotel", "", nil))}}, ""},
		{"replaced by a fork", &debug.BuildInfo{Deps: []*debug.Module{mod(ScopeName, "v0.1.0", mod("example.com/fork/dlmotel", "v0.1.2", nil))}}, "v0.1.2"},
		{"not among the modules", &debug.BuildInfo{Deps: []*debug.Module{mod("github.com/dlmgo/dlm", "v0.1.0", nil)}}, ""},
	} {
		if got := versionIn(tc.bi); got != tc.want {
			t.Errorf("%s: versionIn = %q, want %q", tc.name, got, tc.want)
		}
	}
}
