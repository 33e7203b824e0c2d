package dlm_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// The README's Go blocks marked <!-- example: NAME --> are the body of
// the Example function NAME in example_test.go (between "// README: begin"
// and "// README: end" when the body has them), indented one tab less.
func TestReadmeExamplesMatchExampleTests(t *testing.T) {
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := readmeExamples(string(readme))
	if err != nil {
		t.Fatal(err)
	}
	if len(blocks) == 0 {
		t.Fatal("README.md marks no Go block with <!-- example: NAME -->")
	}
	for name, block := range blocks {
		want, err := exampleRegion(string(src), name)
		if err != nil {
			t.Errorf("README.md's example %s: %v", name, err)
			continue
		}
		if block != want {
			t.Errorf("README.md's example %s differs from example_test.go; copy the region between the README markers there:\n--- README.md\n%s\n--- example_test.go\n%s", name, block, want)
		}
	}
}

// The check above fails on what it is meant to catch.
func TestReadmeExampleCheckCatchesDrift(t *testing.T) {
	src := "package x_test\n\nfunc Example() {\n\tsetup()\n\n\t// README: begin\n\ta := 1\n\tif a > 0 {\n\t\tuse(a)\n\t}\n\t// README: end\n\n\t// Output:\n}\n\nfunc ExampleOther() {\n\tb()\n}\n"
	got, err := exampleRegion(src, "Example")
	if err != nil {
		t.Fatal(err)
	}
	if want := "a := 1\nif a > 0 {\n\tuse(a)\n}"; got != want {
		t.Fatalf("region of Example = %q, want %q", got, want)
	}
	if got, _ := exampleRegion(src, "ExampleOther"); got != "b()" {
		t.Fatalf("body of ExampleOther = %q, want %q", got, "b()")
	}
	if _, err := exampleRegion(src, "ExampleMissing"); err == nil {
		t.Fatal("a missing Example was not reported")
	}

	same := "text\n<!-- example: Example -->\n```go\na := 1\nif a > 0 {\n\tuse(a)\n}\n```\n"
	drifted := strings.Replace(same, "a := 1", "a := 2", 1)
	for _, c := range []struct {
		md        string
		different bool
	}{{same, false}, {drifted, true}} {
		blocks, err := readmeExamples(c.md)
		if err != nil {
			t.Fatal(err)
		}
		if differs := blocks["Example"] != mustRegion(t, src); differs != c.different {
			t.Errorf("README block %q: differs = %v, want %v", blocks["Example"], differs, c.different)
		}
	}
	if _, err := readmeExamples("<!-- example: Example -->\nno code here\n"); err == nil {
		t.Fatal("a marker without a Go block after it was not reported")
	}
}

func mustRegion(t *testing.T, src string) string {
	t.Helper()
	s, err := exampleRegion(src, "Example")
	if err != nil {
		t.Fatal(err)
	}
	return s
}

var exampleMarker = regexp.MustCompile(`^<!-- example: (\w+) -->$`)

// readmeExamples returns, by Example name, the Go block that follows each
// <!-- example: NAME --> line of md.
func readmeExamples(md string) (map[string]string, error) {
	lines := strings.Split(md, "\n")
	blocks := map[string]string{}
	for i, l := range lines {
		m := exampleMarker.FindStringSubmatch(strings.TrimSpace(l))
		if m == nil {
			continue
		}
		if i+1 >= len(lines) || strings.TrimSpace(lines[i+1]) != "```go" {
			return nil, fmt.Errorf("line %d: the marker of %s is not followed by a ```go block", i+1, m[1])
		}
		end := i + 2
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: the block of %s does not end", i+2, m[1])
		}
		blocks[m[1]] = strings.Join(lines[i+2:end], "\n")
	}
	return blocks, nil
}

// exampleRegion returns the body of func name() in src, or its part between
// "// README: begin" and "// README: end", with one level of indentation
// removed and blank lines at either end dropped.
func exampleRegion(src, name string) (string, error) {
	lines := strings.Split(src, "\n")
	start := -1
	for i, l := range lines {
		if l == "func "+name+"() {" {
			start = i + 1
			break
		}
	}
	if start < 0 {
		return "", fmt.Errorf("no func %s() in the file", name)
	}
	end := start
	for end < len(lines) && lines[end] != "}" {
		end++
	}
	if end == len(lines) {
		return "", fmt.Errorf("func %s() does not end", name)
	}
	body := lines[start:end]
	for i, l := range body {
		if strings.TrimSpace(l) == "// README: begin" {
			body = body[i+1:]
			break
		}
	}
	for i, l := range body {
		if strings.TrimSpace(l) == "// README: end" {
			body = body[:i]
			break
		}
	}
	var out []string
	for _, l := range body {
		out = append(out, strings.TrimPrefix(l, "\t"))
	}
	for len(out) > 0 && strings.TrimSpace(out[0]) == "" {
		out = out[1:]
	}
	for len(out) > 0 && strings.TrimSpace(out[len(out)-1]) == "" {
		out = out[:len(out)-1]
	}
	return strings.Join(out, "\n"), nil
}

// Every relative link of README.md and docs/*.md names a file that exists,
// and every #anchor a heading of the file it points into.
func TestLinksResolve(t *testing.T) {
	t.Parallel() // reads files: it overlaps with the other parallel tests
	files, err := filepath.Glob("docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append([]string{"README.md"}, files...)
	for _, f := range files {
		for _, p := range brokenLinks(f) {
			t.Error(p)
		}
	}
}

// The link check catches a missing file and a missing anchor, follows
// GitHub's heading slugs, and ignores what is inside code.
func TestLinksCheckCatchesBrokenLinks(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("x.go", "package x\n")
	write("b.md", "# What a lock guarantees — and what it does not\n\n## `dlm run`\n\n## Twice\n\n## Twice\n\n```sh\n# not a heading\n```\n")
	write("a.md", strings.Join([]string{
		"# A",
		"[ok](b.md) [ok](b.md#what-a-lock-guarantees--and-what-it-does-not) [ok](b.md#dlm-run) [ok](b.md#twice-1) [ok](#a)",
		"[ok](https://example.com/nowhere) [ok](x.go#L12)",
		"[missing file](c.md)",
		"[missing anchor](b.md#no-such-heading)",
		"[code block heading](b.md#not-a-heading)",
		"[missing here](#nowhere)",
		"`[in code](gone.md)`",
		"```",
		"[in a block](gone.md)",
		"```",
	}, "\n"))
	got := brokenLinks(filepath.Join(dir, "a.md"))
	want := []string{"c.md", "b.md#no-such-heading", "b.md#not-a-heading", "#nowhere"}
	if len(got) != len(want) {
		t.Fatalf("problems = %q, want one for each of %q", got, want)
	}
	for i, w := range want {
		if !strings.Contains(got[i], "("+w+")") {
			t.Errorf("problem %d = %q, want one about %q", i, got[i], w)
		}
	}
}

var (
	linkTarget = regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpan   = regexp.MustCompile("`[^`]*`")
	headingRe  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	schemeRe   = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
)

// brokenLinks reports the relative links of the Markdown file that do not
// resolve, each as "file:line: (target): why".
func brokenLinks(file string) []string {
	text, err := os.ReadFile(file)
	if err != nil {
		return []string{err.Error()}
	}
	var problems []string
	for i, line := range outsideCode(string(text)) {
		for _, m := range linkTarget.FindAllStringSubmatch(codeSpan.ReplaceAllString(line, ""), -1) {
			target := m[1]
			if schemeRe.MatchString(target) {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			dest := file
			if path != "" {
				dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
			}
			if _, err := os.Stat(dest); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: (%s): %v", file, i+1, target, errors.Unwrap(err)))
				continue
			}
			if anchor == "" || !strings.HasSuffix(dest, ".md") {
				continue
			}
			slugs, err := headingSlugs(dest)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: (%s): %v", file, i+1, target, err))
			} else if !slugs[anchor] {
				problems = append(problems, fmt.Sprintf("%s:%d: (%s): no heading of %s has that anchor", file, i+1, target, dest))
			}
		}
	}
	return problems
}

// outsideCode returns the lines of md with those of fenced code blocks
// blanked, so that line numbers stay.
func outsideCode(md string) []string {
	lines := strings.Split(md, "\n")
	fenced := false
	for i, l := range lines {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			fenced = !fenced
			lines[i] = ""
		} else if fenced {
			lines[i] = ""
		}
	}
	return lines
}

// headingSlugs returns the anchors GitHub gives the headings of a Markdown
// file: lower case, letters, digits, marks, '-' and '_' kept, spaces made
// '-', the rest dropped; a repeated slug gets -1, -2, ….
func headingSlugs(file string) (map[string]bool, error) {
	text, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	slugs := map[string]bool{}
	seen := map[string]int{}
	for _, l := range outsideCode(string(text)) {
		m := headingRe.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		var b strings.Builder
		for _, r := range strings.ToLower(m[1]) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r):
				b.WriteRune(r)
			}
		}
		s := b.String()
		if n := seen[s]; n > 0 {
			seen[s]++
			s = fmt.Sprintf("%s-%d", s, n)
		} else {
			seen[s] = 1
		}
		slugs[s] = true
	}
	return slugs, nil
}
