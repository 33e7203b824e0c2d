package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
)

// A proxyModule is one module version a file-system module proxy serves.
type proxyModule struct {
	Path, Version string
	Mod, Zip      []byte
	Time          time.Time
}

// writeProxy lays mods out in dir as the module proxy protocol (go help
// goproxy) wants them: dir/<escaped path>/@v/list, <version>.info, .mod
// and .zip, so that GOPROXY=file://dir serves them.
func writeProxy(dir string, mods []proxyModule) error {
	versions := map[string][]string{}
	for _, m := range mods {
		esc, err := module.EscapePath(m.Path)
		if err != nil {
			return err
		}
		escV, err := module.EscapeVersion(m.Version)
		if err != nil {
			return err
		}
		at := filepath.Join(dir, filepath.FromSlash(esc), "@v")
		if err := os.MkdirAll(at, 0o755); err != nil {
			return err
		}
		info, err := json.Marshal(struct {
			Version string
			Time    time.Time
		}{m.Version, m.Time.UTC()})
		if err != nil {
			return err
		}
		for ext, data := range map[string][]byte{".info": info, ".mod": m.Mod, ".zip": m.Zip} {
			if err := os.WriteFile(filepath.Join(at, escV+ext), data, 0o644); err != nil {
				return err
			}
		}
		versions[at] = append(versions[at], m.Version)
	}
	for at, vs := range versions {
		sort.Slice(vs, func(i, j int) bool { return semver.Compare(vs[i], vs[j]) < 0 })
		if err := os.WriteFile(filepath.Join(at, "list"), []byte(strings.Join(vs, "\n")+"\n"), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// fileURL is the file:// URL of the directory dir.
func fileURL(dir string) string {
	return "file://" + filepath.ToSlash(dir)
}

// publicProxies is the module proxies of `go env GOPROXY`, without direct
// and off: where the rehearsal fetches the modules it does not serve.
func publicProxies() (string, error) {
	out, err := exec.Command("go", "env", "GOPROXY").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOPROXY: %w", err)
	}
	var list []string
	for _, p := range strings.FieldsFunc(strings.TrimSpace(string(out)), func(r rune) bool { return r == ',' || r == '|' }) {
		if p != "direct" && p != "off" {
			list = append(list, p)
		}
	}
	if len(list) == 0 {
		return "", fmt.Errorf("go env GOPROXY is %q: no module proxy to fetch public modules from", strings.TrimSpace(string(out)))
	}
	return strings.Join(list, ","), nil
}

// localDownloads is the download cache of the caller's module cache as a
// file:// proxy ("" when there is none): modules the caller has fetched
// already come from there, verified like any proxy's, and only the rest
// from the network.
func localDownloads() string {
	out, err := exec.Command("go", "env", "GOMODCACHE").Output()
	if err != nil {
		return ""
	}
	dir := filepath.Join(strings.TrimSpace(string(out)), "cache", "download")
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return ""
	}
	return fileURL(dir)
}

// isolatedEnv is the environment of a go command that sees the
// repository's modules only through the file proxy at proxyDir: module
// mode without go.work, an empty module cache of its own in cache (made
// writable so that it can be removed), the checksum database skipped for
// the repository's modules only (they are not published) and consulted
// for every other. prefix is the core's module path.
func isolatedEnv(proxyDir, cache, gobin, prefix string) ([]string, error) {
	public, err := publicProxies()
	if err != nil {
		return nil, err
	}
	proxies := []string{fileURL(proxyDir)}
	if local := localDownloads(); local != "" {
		proxies = append(proxies, local)
	}
	proxies = append(proxies, public)
	set := map[string]string{
		"GOWORK":      "off",
		"GOMODCACHE":  cache,
		"GOFLAGS":     "-modcacherw -trimpath",
		"GOPROXY":     strings.Join(proxies, ","),
		"GONOSUMDB":   prefix,
		"GOPRIVATE":   "",
		"GONOPROXY":   "",
		"GOINSECURE":  "",
		"GOTOOLCHAIN": "local",
		"GOBIN":       gobin,
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			env = append(env, kv)
		}
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+set[k])
	}
	return env, nil
}
