package events

import (
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"strconv"
	"testing"
)

// Kinds lists every Kind constant of event.go, once: a kind declared and
// left out of the list would be refused by tail --kind, as scheduled was.
func TestKindsListsEveryKindConstant(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "event.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []Kind
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Kind" {
				continue
			}
			for _, v := range vs.Values {
				lit, ok := v.(*ast.BasicLit)
				if !ok {
					t.Fatalf("a Kind constant's value is not a string literal: %#v", v)
				}
				s, err := strconv.Unquote(lit.Value)
				if err != nil {
					t.Fatal(err)
				}
				declared = append(declared, Kind(s))
			}
		}
	}
	if len(declared) < 30 {
		t.Fatalf("found only %d Kind constants in event.go: the parse is wrong", len(declared))
	}
	listed := Kinds()
	for _, k := range declared {
		if !slices.Contains(listed, k) {
			t.Errorf("kind %q is declared but not in Kinds()", k)
		}
		if !k.Known() {
			t.Errorf("Kind(%q).Known() = false", k)
		}
	}
	if len(listed) != len(declared) {
		t.Errorf("Kinds() has %d kinds, event.go declares %d (a duplicate?)", len(listed), len(declared))
	}
	if Kind("finished").Known() {
		t.Error(`Kind("finished").Known() = true`)
	}
}
