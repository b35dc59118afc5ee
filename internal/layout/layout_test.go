// Package layout holds only tests: the import rules docs/architecture.md
// states, checked against every Go file of the module, so that the folder
// tree keeps explaining the design, and the naming rule for durations in
// log lines (logs_test.go).
package layout_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const module = "github.com/opledger/opledger/"

// imports maps each package directory (relative to the module root) to the
// module packages its non-test files import.
func imports(t *testing.T) map[string]map[string]bool {
	t.Helper()
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	out := map[string]map[string]bool{}
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, filepath.Dir(path))
		rel = filepath.ToSlash(rel)
		if out[rel] == nil {
			out[rel] = map[string]bool{}
		}
		for _, imp := range f.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			out[rel][p] = true
		}
		return nil
	})
	require.NoError(t, err)
	require.NotEmpty(t, out["pkg/op"], "found the module's packages")
	return out
}

// The public packages (pkg/) never import internal/ or the generated code;
// the domain core imports only the standard library; only internal/store
// imports the generated queries (db/dbsqlc); and no library package
// imports a main or a service's wiring.
func TestImportRules(t *testing.T) {
	t.Parallel()
	for dir, imps := range imports(t) {
		for imp := range imps {
			own, isOwn := strings.CutPrefix(imp, module)
			switch {
			case dir == "pkg/op":
				require.False(t, strings.Contains(strings.SplitN(imp, "/", 2)[0], "."),
					"pkg/op is the domain core, standard library only; it imports %s", imp)
			case strings.HasPrefix(dir, "pkg/") && isOwn:
				require.True(t, strings.HasPrefix(own, "pkg/") || own == "schema",
					"%s is public and imports %s: pkg/ imports only pkg/ (and the embedded schemas)", dir, imp)
			}
			if isOwn && own == "db/dbsqlc" {
				require.Equal(t, "internal/store", dir, "%s imports the generated queries; only internal/store may", dir)
			}
			if isOwn && (strings.HasPrefix(own, "cmd/") || strings.HasPrefix(own, "services/")) {
				require.Fail(t, "a main is imported", "%s imports %s", dir, imp)
			}
		}
	}
}
