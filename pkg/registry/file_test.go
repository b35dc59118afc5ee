package registry

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRegistryField(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"URL":                               "adapter.path",
		"Lookup.StatusPointer":              "adapter.lookup.status_pointer",
		`Headers["X-Key"]`:                  "adapter.headers.X-Key",
		`Body.Fields["a"]["b\"]c"][1]`:      `adapter.body.fields.a.b"]c[1]`,
		`Body.Fields["metadata[order_id]"]`: "adapter.body.fields.metadata[order_id]",
		"Nonsense":                          "",
	} {
		require.Equal(t, want, registryField(in), in)
	}
	require.Equal(t, "not an HTTP status, or equal to adapter.lookup.found_status",
		userTerms("not an HTTP status, or equal to FoundStatus", true))
	require.Equal(t, `the header is also set by adapter.headers.X-Token`,
		userTerms(`the header is also set by Headers["X-Token"]`, false))
	require.Equal(t, "a GET request sends no body", userTerms("a GET request sends no body", false))
}

func TestSuggest(t *testing.T) {
	t.Parallel()
	known := []string{"key_template", "timeout", "type", "id", "max_attempts", "initial_backoff"}
	for in, want := range map[string]string{
		"key_templat":    "key_template",
		"Key_Template":   "key_template",
		"key-template":   "key_template",
		"timout":         "timeout",
		"tpye":           "type",
		"initial_backof": "initial_backoff",
		"x":              "",
		"colour":         "",
		"ip":             "id",
		"zz":             "", // two edits of a two-letter name is any name
	} {
		require.Equal(t, want, suggest(in, known), in)
	}
}
