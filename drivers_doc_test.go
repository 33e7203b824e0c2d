package dlm_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// driverClients names the client of each directory under driver/ as prose
// and lists name it. A new driver needs an entry, and then every count and
// list of drivers in the docs must take it in (TestDocsNameEveryDriver).
var driverClients = map[string]string{
	"goredis":  "go-redis",
	"redigo":   "redigo",
	"rueidis":  "rueidis",
	"valkeygo": "valkey-go",
}

// partialDriverLists are the places that list several drivers but not all
// of them on purpose, each found by a piece of its text, with why.
var partialDriverLists = []struct{ file, text, why string }{
	{"docs/performance.md", "(over go-redis, redigo and rueidis pools)", "the clients redsync supports, not dlm's drivers"},
	{"docs/performance.md", "the same-client peer (go-redis, redigo, rueidis)", "valkey-go has no same-client peer among the libraries compared"},
	{"docs/drivers.md", "| Trap | What goes wrong | go-redis v9", "valkey-go's column would repeat rueidis'; the paragraph after the table says so"},
	{"docs/drivers.md", "go-redis, rueidis and valkey-go through Sentinel, redigo on the primary", "redigo is named after the list"},
	{"docs/redlock.md", "(`TestRedlockRefusesOneServerTwice`: go-redis, redigo and rueidis clients", "the clients that test uses"},
	{"bench_test.go", "the named client's driver: goredis, redigo or rueidis", "the root package's micro-benchmarks: valkey-go's Node is rueidis' (nodekit.PipeNode); bench/ measures all four"},
}

// docText is a paragraph of documentation: a Markdown paragraph or table
// line, or a comment of a Go file, with its lines joined.
type docText struct {
	file string // slash path from the repository's root
	text string
}

// Counts of drivers ("the three drivers") and lists of clients ("go-redis,
// redigo and rueidis") in the docs and doc comments drift when a driver is
// added: each must name as many drivers as driver/ holds.
func TestDocsNameEveryDriver(t *testing.T) {
	t.Parallel() // parses every Go file, CPU-bound: it overlaps with the other parallel tests
	entries, err := os.ReadDir("driver")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() {
			if gos, _ := filepath.Glob(filepath.Join("driver", e.Name(), "*.go")); len(gos) > 0 {
				dirs = append(dirs, e.Name())
			}
		}
	}
	var known []string
	for d := range driverClients {
		known = append(known, d)
	}
	sort.Strings(known)
	if !slices.Equal(dirs, known) {
		t.Fatalf("driver/ holds %v, driverClients names %v: name each driver's client there", dirs, known)
	}
	texts, err := docTexts(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problemsWithDrivers(texts, len(dirs)) {
		t.Error(p)
	}
}

// problemsWithDrivers reports the counts of drivers other than n and the
// lists or table rows that name some of the drivers but not all.
func problemsWithDrivers(texts []docText, n int) []string {
	var problems []string
	allowed := func(d docText, s string) bool {
		for _, a := range partialDriverLists {
			if d.file == a.file && (strings.Contains(s, a.text) || strings.Contains(a.text, s) && strings.Contains(d.text, a.text)) {
				return true
			}
		}
		return false
	}
	for _, d := range texts {
		for _, m := range countRE.FindAllStringSubmatch(d.text, -1) {
			if k := numberWord(m[1]); k != n {
				problems = append(problems, d.file+": "+strconv.Quote(m[0])+": driver/ holds "+strconv.Itoa(n)+" drivers")
			}
		}
		for _, list := range listRE.FindAllString(d.text, -1) {
			names := driversIn(list)
			if len(names) >= 3 && len(names) < n && !allowed(d, list) {
				problems = append(problems, d.file+": "+strconv.Quote(list)+" names "+strings.Join(names, ", ")+" but not every driver (see driverClients; or add the place to partialDriverLists, with why)")
			}
		}
		if strings.HasPrefix(d.text, "|") {
			names := driverPathsIn(d.text)
			if len(names) >= 3 && len(names) < n && !allowed(d, d.text) {
				problems = append(problems, d.file+": table row "+strconv.Quote(trim(d.text))+" names "+strings.Join(names, ", ")+" but not every driver")
			}
		}
	}
	// Tables with a row per driver package.
	for file, rows := range driverTableRows(texts) {
		for _, table := range rows {
			if len(table) >= 2 && len(table) < n {
				problems = append(problems, file+": a table has rows for "+strings.Join(table, ", ")+" but not for every package under driver/")
			}
		}
	}
	sort.Strings(problems)
	return problems
}

var (
	numberWords = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}
	countRE     = regexp.MustCompile(`(?i)\b(` + strings.Join(numberWords[2:], "|") + `|\d+)\s+(?:client\s+|redis\s+)?(?:drivers|driver adapters|driver packages)\b`)
	clientName  = "(?:go-redis|redigo|rueidis|valkey-go|goredis|valkeygo)"
	listItem    = "`?(?:driver/)?" + clientName + "`?(?: v9)?"
	listRE      = regexp.MustCompile(`(?i)` + listItem + `(?:(?:\s*,\s*(?:and\s+|or\s+)?|\s+(?:and|or)\s+)` + listItem + `)+`)
	pathRE      = regexp.MustCompile("`driver/([a-z]+)`")
	firstCellRE = regexp.MustCompile("^\\|\\s*`driver/([a-z]+)`\\s*\\|")
)

func numberWord(s string) int {
	if i := slices.Index(numberWords, strings.ToLower(s)); i >= 0 {
		return i
	}
	n, _ := strconv.Atoi(s)
	return n
}

// driversIn is the drivers a list names, by directory.
func driversIn(list string) []string {
	var names []string
	for dir, client := range driverClients {
		if regexp.MustCompile(`(?i)(^|[^a-z-])(` + regexp.QuoteMeta(client) + `|` + dir + `)([^a-z-]|$)`).MatchString(list) {
			names = append(names, dir)
		}
	}
	sort.Strings(names)
	return names
}

func driverPathsIn(s string) []string {
	seen := map[string]bool{}
	for _, m := range pathRE.FindAllStringSubmatch(s, -1) {
		seen[m[1]] = true
	}
	var names []string
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// driverTableRows is, per file, each Markdown table's driver packages named
// in the first cell of its rows.
func driverTableRows(texts []docText) map[string][][]string {
	out := map[string][][]string{}
	var cur []string
	prevFile := ""
	flush := func() {
		if len(cur) > 0 {
			out[prevFile] = append(out[prevFile], cur)
		}
		cur = nil
	}
	for _, d := range texts {
		if d.file != prevFile || !strings.HasPrefix(d.text, "|") {
			flush()
		}
		prevFile = d.file
		if m := firstCellRE.FindStringSubmatch(d.text); m != nil {
			cur = append(cur, m[1])
		}
	}
	flush()
	return out
}

func trim(s string) string {
	if len(s) > 100 {
		return s[:100] + "…"
	}
	return s
}

// docTexts reads the Markdown files and the comments of the Go files under
// root, leaving out results/ directories (records of past runs) and
// testdata.
func docTexts(root string) ([]docText, error) {
	var texts []docText
	err := filepath.WalkDir(root, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if e.IsDir() {
			if n := e.Name(); p != root && (strings.HasPrefix(n, ".") || n == "results" || n == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if e.Name() == "drivers_doc_test.go" {
			return nil // this file's examples of drift
		}
		rel := filepath.ToSlash(p)
		switch {
		case strings.HasSuffix(p, ".md"):
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			texts = append(texts, markdownTexts(rel, string(data))...)
		case strings.HasSuffix(p, ".go"):
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ParseComments|parser.SkipObjectResolution)
			if err != nil {
				return err
			}
			for _, g := range f.Comments {
				texts = append(texts, docText{rel, strings.Join(strings.Fields(g.Text()), " ")})
			}
		}
		return nil
	})
	return texts, err
}

// markdownTexts splits Markdown into paragraphs (lines joined) and table
// lines (one each); code blocks are left out.
func markdownTexts(file, md string) []docText {
	var texts []docText
	var para []string
	flush := func() {
		if len(para) > 0 {
			texts = append(texts, docText{file, strings.Join(para, " ")})
		}
		para = nil
	}
	inCode := false
	for _, line := range strings.Split(md, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			flush()
			inCode = !inCode
		case inCode:
		case trimmed == "":
			flush()
		case strings.HasPrefix(trimmed, "|"):
			flush()
			texts = append(texts, docText{file, trimmed})
		default:
			para = append(para, trimmed)
		}
	}
	flush()
	return texts
}

// The check above finds the drift it is meant to catch, and passes what it
// must pass.
func TestDocsNameEveryDriverCatchesDrift(t *testing.T) {
	md := "The three drivers dial through nodekit.\n\n" +
		"The packages under driver/ adapt go-redis,\nredigo and rueidis.\n\n" +
		"| Package | What |\n|---|---|\n| `driver/goredis` | a |\n| `driver/redigo` | b |\n| `driver/rueidis` | c |\n\n" +
		"Fine: the four drivers; go-redis and rueidis; go-redis, redigo, rueidis or valkey-go; both drivers.\n"
	texts := markdownTexts("x.md", md)
	texts = append(texts, docText{"x.go", "adapt `driver/goredis`, `driver/redigo` and `driver/rueidis`"})
	got := problemsWithDrivers(texts, 4)
	want := []string{`"three drivers"`, `"go-redis, redigo and rueidis"`, "rows for goredis, redigo, rueidis", "`driver/goredis`, `driver/redigo` and `driver/rueidis`"}
	if len(got) != len(want) {
		t.Fatalf("found %d problems, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for _, w := range want {
		found := false
		for _, g := range got {
			found = found || strings.Contains(g, w)
		}
		if !found {
			t.Errorf("no problem mentions %s:\n%s", w, strings.Join(got, "\n"))
		}
	}
}
