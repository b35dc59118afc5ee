package layout_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A duration in a log line says its unit in its name: zerolog writes
// Dur fields as milliseconds (its default DurationFieldUnit, which
// nothing in the module changes), so every Dur field of the module's
// non-test code is named *_ms.
//
// Breaking it: log .Dur("latency", d) anywhere; the reader of the line
// cannot tell 40 from 40 seconds.
func TestLogDurationsNameTheirUnit(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var bad []string
	seen := 0
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
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if id, ok := n.(*ast.Ident); ok && id.Name == "DurationFieldUnit" {
				bad = append(bad, fset.Position(id.Pos()).String()+": changes zerolog.DurationFieldUnit")
			}
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) < 2 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Dur" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			seen++
			if name, _ := strconv.Unquote(lit.Value); !strings.HasSuffix(name, "_ms") {
				bad = append(bad, fset.Position(lit.Pos()).String()+": Dur field "+lit.Value+" does not end in _ms")
			}
			return true
		})
		return nil
	})
	require.NoError(t, err)
	require.Positive(t, seen, "found the module's Dur fields")
	require.Empty(t, bad)
}
