package registry_test

import (
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The rules of docs/registry.md are referred to by number ("rule 17"), in
// the document and in problems. Markdown numbers an ordered list by
// position, whatever the source says, so the source must count 1, 2, 3, …
// for its numbers to be the ones readers see, and every reference must name
// a rule that exists.
//
// Breaking it: a rule inserted as "18." after 14 renders as 15 and shifts
// every later rule, while "rule 19" still means the source's 19.
func TestRuleNumbersAreTheRenderedOnes(t *testing.T) {
	t.Parallel()
	md, err := os.ReadFile("../../docs/registry.md")
	require.NoError(t, err)
	doc := string(md)
	start := strings.Index(doc, "## Rules you cannot guess")
	require.GreaterOrEqual(t, start, 0)
	end := start + strings.Index(doc[start:], "\n## Reference")
	item := regexp.MustCompile(`(?m)^(\d+)\. \*\*`)
	rules := item.FindAllStringSubmatch(doc[start:end], -1)
	require.NotEmpty(t, rules)
	for i, m := range rules {
		require.Equal(t, strconv.Itoa(i+1), m[1], "rule %d of the list is numbered %s in the source", i+1, m[1])
	}
	ref := regexp.MustCompile(`\brules? (\d+)(?:[–-](\d+))?`)
	for _, m := range ref.FindAllStringSubmatch(doc, -1) {
		for _, n := range m[1:] {
			if n == "" {
				continue
			}
			k, _ := strconv.Atoi(n)
			require.True(t, k >= 1 && k <= len(rules), "%q names no rule (there are %d)", m[0], len(rules))
		}
	}
}
