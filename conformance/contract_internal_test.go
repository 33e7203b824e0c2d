package conformance

import (
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
)

// TestContractNamesEveryRule checks docs/driver-contract.md, the one
// document of the driver contract, against the rules RunNode runs: its
// "Every rule" list names each rule once, in order, no more, and marks as
// owned exactly the rules that need the harness; every rule name it cites
// in brackets elsewhere exists, and every rule is cited there; the lists of
// owned rules in the Go docs are the owned rules (issue 53: seven rules
// were documented nowhere, and the docs disagreed on which are owned).
func TestContractNamesEveryRule(t *testing.T) {
	b, err := os.ReadFile("../docs/driver-contract.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	body, list, ok := strings.Cut(doc, "\n## Every rule\n")
	if !ok {
		t.Fatal(`docs/driver-contract.md has no "## Every rule" section`)
	}
	if i := strings.Index(list, "\n## "); i >= 0 {
		list = list[:i]
	}
	var listed, markedOwned []string
	for _, m := range regexp.MustCompile(`(?m)^- ((?:\*\*\w+\*\*(?:, )?)+)( \*\(owned\)\*)?:`).FindAllStringSubmatch(list, -1) {
		for _, n := range regexp.MustCompile(`\*\*(\w+)\*\*`).FindAllStringSubmatch(m[1], -1) {
			listed = append(listed, n[1])
			if m[2] != "" {
				markedOwned = append(markedOwned, n[1])
			}
		}
	}
	var names, owned []string
	for _, r := range nodeRules {
		names = append(names, r.name)
		if r.owned {
			owned = append(owned, r.name)
		}
	}
	for _, n := range names {
		if !slices.Contains(listed, n) {
			t.Errorf("rule %s is missing from docs/driver-contract.md's \"Every rule\"", n)
		}
	}
	for _, n := range listed {
		if !slices.Contains(names, n) {
			t.Errorf("docs/driver-contract.md's \"Every rule\" names %s, which is no rule of RunNode (rules: %v)", n, names)
		}
	}
	if len(listed) == len(names) && !slices.Equal(listed, names) {
		t.Errorf("docs/driver-contract.md's \"Every rule\" lists the rules in the order %v; RunNode runs them in the order %v", listed, names)
	}
	if !slices.Equal(markedOwned, owned) {
		t.Errorf("docs/driver-contract.md marks %v owned; the rules that need the harness are %v", markedOwned, owned)
	}
	// Citations in the body: [Rule, Rule].
	cited := map[string]bool{}
	for _, m := range regexp.MustCompile(`\[([^\]]+)\]`).FindAllStringSubmatch(strings.ReplaceAll(body, "\n", " "), -1) {
		for _, tok := range strings.Split(m[1], ",") {
			tok = strings.TrimSpace(tok)
			if !regexp.MustCompile(`^[A-Z][A-Za-z]+$`).MatchString(tok) {
				continue // not a rule's name (a link, code, a list of words)
			}
			if !slices.Contains(names, tok) {
				t.Errorf("docs/driver-contract.md cites [%s], which is no rule of RunNode", tok)
			}
			cited[tok] = true
		}
	}
	for _, n := range names {
		if !cited[n] {
			t.Errorf("docs/driver-contract.md states no part of the contract that rule %s checks (no [%s] before \"Every rule\")", n, n)
		}
	}
	// The Go docs' lists of the owned rules.
	sortedOwned := slices.Clone(owned)
	sort.Strings(sortedOwned)
	for _, file := range []string{"conformance.go", "node.go", "harness/harness.go"} {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := strings.ReplaceAll(strings.ReplaceAll(string(src), "\n//", ""), "\n", " ")
		found := false
		for _, m := range regexp.MustCompile(`\((NoRetry,[^)]*)\)`).FindAllStringSubmatch(text, -1) {
			got := regexp.MustCompile(`[A-Z]\w+`).FindAllString(m[1], -1)
			sort.Strings(got)
			found = true
			if !slices.Equal(got, sortedOwned) {
				t.Errorf("%s lists the rules that need the harness as (%s); they are %v", file, m[1], owned)
			}
		}
		if !found {
			t.Errorf("%s does not list the rules that need the harness (NoRetry, …)", file)
		}
	}
}
