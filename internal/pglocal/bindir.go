package pglocal

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// serverBinaries must all be present in a usable bin dir.
var serverBinaries = []string{"initdb", "postgres"}

// binGlobs are the distribution layouts searched last, newest version first:
// Debian/Ubuntu and the PGDG RPMs.
var binGlobs = []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin"}

// BinDir returns the directory holding the PostgreSQL server binaries
// (initdb, postgres). It looks, in order, at:
//
//  1. $PG_BINDIR (if set, it must be right: no fallback),
//  2. `pg_config --bindir` (on Debian /usr/bin/pg_config may name the
//     version of libpq-dev, whose bin dir may lack the server),
//  3. initdb on PATH, symlinks resolved,
//  4. /usr/lib/postgresql/*/bin and /usr/pgsql-*/bin, newest first.
//
// The error wraps ErrBinariesNotFound and says where it looked.
func BinDir() (string, error) {
	if d := os.Getenv("PG_BINDIR"); d != "" {
		if missing := missingBinaries(d); missing != "" {
			return "", fmt.Errorf("%w: PG_BINDIR=%s has no %s", ErrBinariesNotFound, d, missing)
		}
		return d, nil
	}
	var looked []string
	try := func(how, d string) bool {
		if missing := missingBinaries(d); missing != "" {
			looked = append(looked, fmt.Sprintf("%s → %s (no %s)", how, d, missing))
			return false
		}
		return true
	}

	if pc, err := exec.LookPath("pg_config"); err != nil {
		looked = append(looked, "pg_config (not on PATH)")
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		out, err := exec.CommandContext(ctx, pc, "--bindir").Output()
		cancel()
		if d := strings.TrimSpace(string(out)); err != nil || d == "" {
			looked = append(looked, fmt.Sprintf("%s --bindir (failed: %v)", pc, err))
		} else if try(pc+" --bindir", d) {
			return d, nil
		}
	}

	if p, err := exec.LookPath("initdb"); err != nil {
		looked = append(looked, "initdb on PATH (not found)")
	} else {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			real = p
		}
		if d := filepath.Dir(real); try("PATH "+p, d) {
			return d, nil
		}
	}

	for _, g := range binGlobs {
		dirs, _ := filepath.Glob(g)
		slices.SortFunc(dirs, func(a, b string) int { return compareVersions(b, a) })
		if len(dirs) == 0 {
			looked = append(looked, g+" (no match)")
		}
		for _, d := range dirs {
			if try(g, d) {
				return d, nil
			}
		}
	}
	return "", fmt.Errorf("%w; looked at: PG_BINDIR (unset); %s. Install the PostgreSQL server package (e.g. apt-get install postgresql) or set PG_BINDIR",
		ErrBinariesNotFound, strings.Join(looked, "; "))
}

// missingBinaries names the server binaries absent from dir, "" if none.
func missingBinaries(dir string) string {
	var missing []string
	for _, b := range serverBinaries {
		st, err := os.Stat(filepath.Join(dir, b))
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, b)
		}
	}
	return strings.Join(missing, ", ")
}

// compareVersions orders bin dirs by the dotted version number in their
// path (/usr/lib/postgresql/9.6/bin < /usr/lib/postgresql/15/bin).
func compareVersions(a, b string) int {
	va, vb := pathVersion(a), pathVersion(b)
	for i := range max(len(va), len(vb)) {
		var x, y int
		if i < len(va) {
			x = va[i]
		}
		if i < len(vb) {
			y = vb[i]
		}
		if x != y {
			return x - y
		}
	}
	return strings.Compare(a, b)
}

func pathVersion(p string) []int {
	// The version is the path element before "bin": "15", "9.6", "pgsql-16".
	elem := filepath.Base(filepath.Dir(p))
	elem = strings.TrimPrefix(elem, "pgsql-")
	var v []int
	for part := range strings.SplitSeq(elem, ".") {
		n, err := strconv.Atoi(part)
		if err != nil {
			return nil
		}
		v = append(v, n)
	}
	return v
}
