package sdk_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestProvidersImportOnlyTheContract holds the line "providers are out of
// tree in spirit": code under providers/ may import, of capn, only the
// schemas, the events library, the service runtime and providers/ itself —
// never another service's package.
func TestProvidersImportOnlyTheContract(t *testing.T) {
	const module = "github.com/capn-dev/capn/"
	allowed := []string{"schemas/", "events", "services/daemon", "providers/"}
	err := filepath.WalkDir("..", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") {
			return err
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			rest, ok := strings.CutPrefix(p, module)
			if !ok {
				continue
			}
			okImport := false
			for _, a := range allowed {
				if rest == strings.TrimSuffix(a, "/") || strings.HasPrefix(rest, strings.TrimSuffix(a, "/")+"/") {
					okImport = true
				}
			}
			if !okImport {
				t.Errorf("%s imports %s: providers may import only %v of capn", path, p, allowed)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
