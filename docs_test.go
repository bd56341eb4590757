package s3queue_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The repository stands alone: no file in it points at the design notes
// it grew from, which are not part of a clone, and every "invariant N" a
// comment, test or page cites is one of the invariants numbered in
// docs/architecture.md, so that the number means there what the citation
// means.
func TestRepositoryCitesOnlyItsOwnInvariants(t *testing.T) {
	invariants := numberedInvariants(t)
	// The notes' folders and files (ARCHITECTURE in capitals: this
	// repository's is docs/architecture.md); the pattern is built from
	// parts, so that this file does not match itself.
	outside := regexp.MustCompile(`\.\./` + `shared|shared/` + `design|ARCHITECTURE` + `\.md|\.\./` + `seeds/|(?i:design ` + `brief)`)
	cite := regexp.MustCompile(`(?i)\binvariants?\s+#?(\d+(?:\s*(?:,|and|or|&|–|-)\s*#?\d+)*)`)
	number := regexp.MustCompile(`\d+`)
	files := 0
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		// .git, .cache (servers, logs: often a link elsewhere) and the
		// like are not the repository's text.
		if path != "." && strings.HasPrefix(d.Name(), ".") || d.Type()&fs.ModeSymlink != 0 {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(b, 0) >= 0 {
			return nil // binary: images
		}
		files++
		for i, line := range strings.Split(string(b), "\n") {
			if o := outside.FindString(line); o != "" {
				t.Errorf("%s:%d points outside the repository (%q): cite docs/ instead\n  %s", path, i+1, o, strings.TrimSpace(line))
			}
			for _, m := range cite.FindAllStringSubmatch(line, -1) {
				for _, n := range number.FindAllString(m[1], -1) {
					if k, _ := strconv.Atoi(n); !invariants[k] {
						t.Errorf("%s:%d cites invariant %s, which docs/architecture.md does not number\n  %s", path, i+1, n, strings.TrimSpace(line))
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 100 {
		t.Fatalf("read %d files: not the repository", files)
	}
}

// numberedInvariants returns the numbers of the items of the section "The
// invariants" of docs/architecture.md ("1. **One object per task...**").
func numberedInvariants(t *testing.T) map[int]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(b), "\n## The invariants\n")
	if !ok {
		t.Fatal("docs/architecture.md has no section ## The invariants")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	out := map[int]bool{}
	for _, m := range regexp.MustCompile(`(?m)^(\d+)\. \*\*`).FindAllStringSubmatch(section, -1) {
		n, _ := strconv.Atoi(m[1])
		if n != len(out)+1 {
			t.Fatalf("docs/architecture.md numbers invariant %d after %d", n, len(out))
		}
		out[n] = true
	}
	if len(out) == 0 {
		t.Fatal("docs/architecture.md numbers no invariant")
	}
	return out
}
