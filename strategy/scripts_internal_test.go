package strategy

import (
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dlmgo/dlm/internal/eval"
)

var scriptsDir = flag.String("scripts", "", "TestWhatTheServerRuns writes every script, as the server gets it, to this directory")

// scripts/README.md says how each script the strategies run is assembled;
// it must name every one of them, and each must carry what the table says
// it is assembled from.
func TestWhatTheServerRuns(t *testing.T) {
	scripts := map[string]*eval.Script{
		"acquireScript": acquireScript, "failoverAcquireScript": failoverAcquireScript,
		"extendScript": extendScript, "failoverExtendScript": failoverExtendScript,
		"releaseScripts": releaseScripts[0], "fenceScript": fenceScript,
		"serverIDScript": serverIDScript, "probeScript": probeScript,
		"inspectScript": inspectScript, "revokeScript": revokeScript,
	}
	readme, err := os.ReadFile("scripts/README.md")
	if err != nil {
		t.Fatal(err)
	}
	rows := regexp.MustCompile("(?m)^\\| [^|]+ \\| [^|]+ \\| `(\\w+)` \\| ([^|]+) \\|$").FindAllStringSubmatch(string(readme), -1)
	named := map[string]bool{}
	for _, r := range rows {
		s, ok := scripts[r[1]]
		if !ok {
			t.Errorf("the table names %s, which is no script of the strategies", r[1])
			continue
		}
		named[r[1]] = true
		for _, f := range regexp.MustCompile("`([a-z_]+\\.lua)`").FindAllStringSubmatch(r[2], -1) {
			src, err := scriptFS.ReadFile("scripts/" + f[1])
			if err != nil {
				t.Fatal(err)
			}
			if !regexp.MustCompile(regexp.QuoteMeta(string(src[:min(len(src), 200)]))).MatchString(s.Source()) {
				t.Errorf("%s does not carry %s, as the table says", r[1], f[1])
			}
		}
	}
	for name, s := range scripts {
		if !named[name] {
			t.Errorf("scripts/README.md does not say how %s is assembled", name)
		}
		if *scriptsDir != "" {
			if err := os.WriteFile(filepath.Join(*scriptsDir, name+".lua"), []byte(s.Source()), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}
