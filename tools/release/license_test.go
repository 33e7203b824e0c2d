package main

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/licensecheck"
)

// pkg.go.dev shows a module's documentation and README only when it
// recognises its license file, with the scanner of
// github.com/google/licensecheck, as a license that allows redistribution.
// The repository's LICENSE is the Apache License 2.0, the standard text:
// the scanner must find that license alone and cover nearly all the text
// (the standard text scores 100%; an edit to it lowers the score).
func TestLicenseIsRecognised(t *testing.T) {
	root, err := repoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(root, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	cov := licensecheck.Scan(text)
	t.Logf("LICENSE: %.1f%% covered, matches %+v", cov.Percent, cov.Match)
	if len(cov.Match) != 1 || cov.Match[0].ID != "Apache-2.0" || cov.Match[0].IsURL {
		t.Fatalf("LICENSE matches %+v, want the text of Apache-2.0 alone", cov.Match)
	}
	if cov.Percent < 90 {
		t.Fatalf("LICENSE is %.1f%% covered by Apache-2.0, want at least 90%%", cov.Percent)
	}
}

// The check above fails on what it is meant to catch.
func TestLicenseCheckRejects(t *testing.T) {
	for name, text := range map[string]string{
		"a URL alone":  "Licensed under http://www.apache.org/licenses/LICENSE-2.0\n",
		"another text": "All rights reserved. Do not copy.\n",
	} {
		cov := licensecheck.Scan([]byte(text))
		if len(cov.Match) == 1 && cov.Match[0].ID == "Apache-2.0" && !cov.Match[0].IsURL && cov.Percent >= 90 {
			t.Errorf("%s: accepted as the Apache License (%+v, %.1f%%)", name, cov.Match, cov.Percent)
		}
	}
}
