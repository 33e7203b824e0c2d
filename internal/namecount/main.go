// Command namecount counts the exported names go/doc shows for the
// packages in the directories given: types, functions (constructors
// included), methods, constants and variables, test files left out. It is
// the measure of issue 52's "names a user learns for one lock":
//
//	go run ./internal/namecount . ./strategy ./driver/goredis
//
// With NAMES=1 it lists each name.
package main

import (
	"fmt"
	"go/ast"
	"go/doc"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	total := 0
	for _, dir := range os.Args[1:] {
		fset := token.NewFileSet()
		pkgs := map[string][]*ast.File{} // by package name
		paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			panic(err)
		}
		for _, path := range paths {
			if strings.HasSuffix(path, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
			if err != nil {
				panic(err)
			}
			pkgs[f.Name.Name] = append(pkgs[f.Name.Name], f)
		}
		for _, files := range pkgs {
			d, err := doc.NewFromFiles(fset, files, "x")
			if err != nil {
				panic(err)
			}
			var names []string
			add := func(kind string, n ...string) {
				for _, x := range n {
					names = append(names, kind+" "+x)
				}
			}
			vals := func(kind string, vs []*doc.Value) {
				for _, v := range vs {
					add(kind, v.Names...)
				}
			}
			vals("const", d.Consts)
			vals("var", d.Vars)
			for _, f := range d.Funcs {
				add("func", f.Name)
			}
			for _, t := range d.Types {
				add("type", t.Name)
				vals("const", t.Consts)
				vals("var", t.Vars)
				for _, f := range t.Funcs {
					add("func", f.Name)
				}
				for _, m := range t.Methods {
					add("method", t.Name+"."+m.Name)
				}
			}
			if os.Getenv("NAMES") != "" {
				for _, n := range names {
					fmt.Println("  ", n)
				}
			}
			fmt.Printf("%s: %d\n", dir, len(names))
			total += len(names)
		}
	}
	fmt.Println("total:", total)
}
