// Package apicheck holds a test that no exported declaration of a public
// package of the module mentions a type from an internal package.
package apicheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const modulePath = "github.com/s3queue/s3queue"

// knownLeaks lists the exported declarations that still mention an internal
// type (issue 28, item 3). Each entry is a leak to remove; the test fails
// when a new leak appears and when an entry here is no longer a leak.
var knownLeaks = map[string]bool{
	"monitor.Config.Events: internal/events.Bus":                       true,
	"producer.Config.Events: internal/events.Bus":                      true,
	"s3queue.Bus (alias): internal/events.Bus":                         true,
	"s3queue.BusOption (alias): internal/events.Option":                true,
	"s3queue.Event (alias): internal/events.Event":                     true,
	"s3queue.EventKind (alias): internal/events.Kind":                  true,
	"s3queue.PauseState (alias): internal/pause.State":                 true,
	"s3queue.Schedule (alias): internal/schedule.Schedule":             true,
	"s3queue.ScheduleDefinition (alias): internal/schedule.Definition": true,
	"s3queue.Subscription (alias): internal/events.Subscription":       true,
	"worker.Config.Events: internal/events.Bus":                        true,
	"worker.Event (alias): internal/events.Event":                      true,
	"worker.Kind (alias): internal/events.Kind":                        true,
}

// publicDirs returns the module-relative directories of the public packages:
// every directory holding non-test Go files outside internal/, cmd/,
// integration/ and testdata.
func publicDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			switch {
			case rel == "internal", rel == "cmd", rel == "integration",
				d.Name() == "testdata", rel != "." && strings.HasPrefix(d.Name(), "."):
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			seen[filepath.ToSlash(filepath.Dir(rel))] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// internalRefs returns the internal import paths named in expr, given the
// file's import name → path map.
func internalRefs(expr ast.Node, imports map[string]string) []string {
	var out []string
	if expr == nil {
		return nil
	}
	ast.Inspect(expr, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		id, ok := sel.X.(*ast.Ident)
		if !ok {
			return true
		}
		if p, ok := imports[id.Name]; ok && strings.HasPrefix(p, modulePath+"/internal/") {
			out = append(out, strings.TrimPrefix(p, modulePath+"/")+"."+sel.Sel.Name)
		}
		return true
	})
	return out
}

// valueHead returns the part of an untyped var or const initializer that
// names its type: the type of a composite literal or of &T{...}, or nil.
// Calls and plain selectors (an internal constant or error value) are not
// judged: their types are those of an exported alias or of error.
func valueHead(e ast.Expr) ast.Node {
	if u, ok := e.(*ast.UnaryExpr); ok && u.Op == token.AND {
		e = u.X
	}
	if c, ok := e.(*ast.CompositeLit); ok {
		return c.Type
	}
	return nil
}

func fileImports(f *ast.File) map[string]string {
	m := map[string]string{}
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		m[name] = p
	}
	return m
}

// receiverName returns the receiver's base type name, or "".
func receiverName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return ""
	}
	t := fd.Recv.List[0].Type
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	switch x := t.(type) {
	case *ast.IndexExpr:
		t = x.X
	case *ast.IndexListExpr:
		t = x.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// exportedFields returns the exported fields (and embedded types) of a struct
// or the exported methods of an interface, with their type expressions.
func exportedMembers(fl *ast.FieldList) map[string]ast.Expr {
	m := map[string]ast.Expr{}
	if fl == nil {
		return m
	}
	for _, f := range fl.List {
		if len(f.Names) == 0 {
			// Embedded: exported if its type name is exported (an embedded
			// internal type promotes its exported members).
			m["(embedded)"] = f.Type
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				m[n.Name] = f.Type
			}
		}
	}
	return m
}

// leaks reports the exported declarations of the package in dir that
// mention an internal type, as "pkg.Decl: internal/x.T".
func leaks(t *testing.T, root, dir string) []string {
	t.Helper()
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, filepath.Join(root, dir), func(fi fs.FileInfo) bool {
		return !strings.HasSuffix(fi.Name(), "_test.go")
	}, parser.SkipObjectResolution)
	if err != nil {
		t.Fatal(err)
	}
	pkgName := dir
	if dir == "." {
		pkgName = "s3queue"
	}
	var out []string
	add := func(decl string, refs []string) {
		for _, r := range refs {
			out = append(out, pkgName+"."+decl+": "+r)
		}
	}
	for _, pkg := range pkgs {
		for _, f := range pkg.Files {
			imports := fileImports(f)
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					name := d.Name.Name
					if r := receiverName(d); r != "" {
						if !ast.IsExported(r) {
							continue
						}
						name = r + "." + name
					}
					add(name, internalRefs(d.Type, imports))
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							name := s.Name.Name
							if s.TypeParams != nil {
								add(name+" (type params)", internalRefs(s.TypeParams, imports))
							}
							switch tt := s.Type.(type) {
							case *ast.StructType:
								for fn, ft := range exportedMembers(tt.Fields) {
									add(name+"."+fn, internalRefs(ft, imports))
								}
							case *ast.InterfaceType:
								for fn, ft := range exportedMembers(tt.Methods) {
									add(name+"."+fn, internalRefs(ft, imports))
								}
							default:
								kind := " (definition)"
								if s.Assign.IsValid() {
									kind = " (alias)"
								}
								add(name+kind, internalRefs(s.Type, imports))
							}
						case *ast.ValueSpec:
							for i, n := range s.Names {
								if !n.IsExported() {
									continue
								}
								if s.Type != nil {
									add(n.Name, internalRefs(s.Type, imports))
									continue
								}
								// Untyped: without type checking, flag a value
								// that is a composite literal (or its address)
								// of an internal type, or a value taken as is
								// from an internal package whose type is not
								// re-exported under a public name.
								if i < len(s.Values) {
									add(n.Name+" (value)", internalRefs(valueHead(s.Values[i]), imports))
								}
							}
						}
					}
				}
			}
		}
	}
	return out
}

func TestNoInternalTypesInPublicAPI(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatal(err)
	}
	found := map[string]bool{}
	for _, dir := range publicDirs(t, root) {
		for _, l := range leaks(t, root, dir) {
			found[l] = true
		}
	}
	var all []string
	for l := range found {
		all = append(all, l)
	}
	sort.Strings(all)
	for _, l := range all {
		if !knownLeaks[l] {
			t.Errorf("exported declaration mentions an internal type: %s", l)
		}
	}
	for l := range knownLeaks {
		if !found[l] {
			t.Errorf("allowlisted leak %q is gone: remove it from knownLeaks", l)
		}
	}
}
