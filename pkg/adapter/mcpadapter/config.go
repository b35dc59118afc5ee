// Package mcpadapter is the adapter that calls a tool of an upstream MCP
// server: the dispatcher's side of opledger's MCP proxy (docs/mcp.md). The
// registry names the upstream server and its tool; the adapter sends the
// operation's canonical arguments with the idempotency key in _meta (and in
// the tool's idempotency argument when the registry names one or the
// upstream's input schema has an idempotency_key property), classifies what
// comes back in the ledger's terms, and answers the reconciler's lookups
// through a verify tool of the same upstream (a read the registry names).
//
// Classification, most certain first:
//
//   - the session to the upstream could not be had, so tools/call was never
//     sent: retryable;
//   - the upstream refused the request as a protocol error (unknown tool,
//     invalid params): permanent;
//   - a result without isError: success, with the object id read from its
//     structured content when external_id_pointer is set;
//   - a result with isError: the registry's error_outcome (default unknown:
//     an MCP tool error does not say whether the effect happened);
//   - anything else once the request was sent (a timeout, a dropped stream,
//     a closed session, an internal error): unknown, for the reconciler.
//
// Nothing the upstream sends is trusted: results are bounded in size,
// identifiers in length and characters (adapter.Sanitize), texts clipped.
package mcpadapter

import (
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/op"
)

// Meta keys the adapter sets on every upstream tools/call, under opledger's
// own reverse-DNS prefix (docs/mcp.md).
const (
	MetaPrefix         = "dev.opledger/"
	MetaIdempotencyKey = MetaPrefix + "idempotency_key"
	MetaOperationID    = MetaPrefix + "operation_id"
	MetaAttemptID      = MetaPrefix + "attempt_id"
)

// DefaultIdempotencyArgument is the argument that, when an upstream tool's
// input schema has it, receives the idempotency key without the registry
// saying so.
const DefaultIdempotencyArgument = "idempotency_key"

// Placeholders a verify argument may name besides the tool's arguments.
const (
	PlaceholderKey       = "idempotency_key"
	PlaceholderOperation = "operation_id"
)

// Config is one tool's adapter as the registry writes it (adapter.type mcp).
type Config struct {
	// Server names the upstream MCP server (its address is configured
	// outside the registry: OPLEDGER_MCP_<NAME>_URL or _COMMAND).
	Server string
	// Tool is the upstream tool to call.
	Tool string
	// IdempotencyArgument, when set, is the upstream argument that carries
	// the idempotency key, and tells opledger the upstream deduplicates by
	// it. When empty, the key still goes into the upstream's
	// idempotency_key argument if its input schema has one (without the
	// claim that it deduplicates).
	IdempotencyArgument string
	// ErrorOutcome is what a result with isError means (default unknown).
	ErrorOutcome op.Outcome
	// ExternalIDPointer is a JSON pointer into the result's structured
	// content to the upstream's object id.
	ExternalIDPointer string
	// Timeout bounds one call or verify call.
	Timeout time.Duration
	// Verify is how to ask the upstream about an earlier call.
	Verify *VerifyConfig
}

// VerifyConfig calls an upstream read tool to learn whether an effect
// happened.
type VerifyConfig struct {
	Tool string
	// Args maps each verify argument to a literal value, or to exactly one
	// placeholder "{name}": a top-level argument of the operation (its
	// canonical value, type kept), {idempotency_key} or {operation_id}.
	Args map[string]any
	// FoundPointer points at a boolean in the structured content that says
	// whether the upstream has a record. When empty, a record is found when
	// ExternalIDPointer names a non-empty value.
	FoundPointer      string
	ExternalIDPointer string
	StatusPointer     string
	PendingValues     []string
	FailedValues      []string
	SucceededValues   []string
}

// ConfigError says which field of a Config is wrong (registry field names:
// server, tool, verify.args.x, ...).
type ConfigError struct {
	Field  string
	Reason string
}

func (e *ConfigError) Error() string { return "adapter." + e.Field + ": " + e.Reason }

// Unwrap makes errors.Is(err, op.ErrInvalid) true.
func (e *ConfigError) Unwrap() error { return op.ErrInvalid }

var (
	nameRE        = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
	toolRE        = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`) // MCP's tool-name guidance (SEP-986)
	placeholderRE = regexp.MustCompile(`^\{([A-Za-z0-9_]+)\}$`)
)

// ValidServerName reports whether s can name an upstream server: what its
// environment variables are built from.
func ValidServerName(s string) bool { return nameRE.MatchString(s) }

// Check validates cfg and returns the top-level arguments its verify
// templates read (for the registry to check against args_schema). It
// returns every problem, each a *ConfigError.
func Check(cfg Config) (args []string, problems []error) {
	bad := func(field, format string, a ...any) {
		problems = append(problems, &ConfigError{Field: field, Reason: fmt.Sprintf(format, a...)})
	}
	if cfg.Server == "" {
		bad("server", "is required: the upstream MCP server's name")
	} else if !ValidServerName(cfg.Server) {
		bad("server", "must be lower-case letters, digits and _, starting with a letter (it names OPLEDGER_MCP_<NAME>_URL), got %q", cfg.Server)
	}
	if !toolRE.MatchString(cfg.Tool) {
		bad("tool", "must be an MCP tool name (1-128 letters, digits, _ . -), got %q", cfg.Tool)
	}
	if cfg.IdempotencyArgument != "" && !argRE.MatchString(cfg.IdempotencyArgument) {
		bad("idempotency_argument", "must be an argument name, got %q", cfg.IdempotencyArgument)
	}
	switch cfg.ErrorOutcome {
	case "", op.OutcomeUnknown, op.OutcomePermanent, op.OutcomeRetryable:
	default:
		bad("error_outcome", "must be unknown, permanent or retryable, got %q", cfg.ErrorOutcome)
	}
	if cfg.ExternalIDPointer != "" {
		if _, err := parsePointer(cfg.ExternalIDPointer); err != nil {
			bad("external_id_pointer", "%v", err)
		}
	}
	v := cfg.Verify
	if v == nil {
		return nil, problems
	}
	if !toolRE.MatchString(v.Tool) {
		bad("verify.tool", "must be an MCP tool name (1-128 letters, digits, _ . -), got %q", v.Tool)
	}
	for _, name := range sortedKeys(v.Args) {
		if !argRE.MatchString(name) {
			bad("verify.args."+name, "must be an argument name")
			continue
		}
		s, ok := v.Args[name].(string)
		if !ok {
			continue
		}
		if m := placeholderRE.FindStringSubmatch(s); m != nil {
			if m[1] != PlaceholderKey && m[1] != PlaceholderOperation {
				args = append(args, m[1])
			}
		} else if strings.ContainsAny(s, "{}") {
			bad("verify.args."+name, "is a literal or exactly one placeholder such as \"{order_id}\", got %q", s)
		}
	}
	for field, p := range map[string]string{"verify.found_pointer": v.FoundPointer, "verify.external_id_pointer": v.ExternalIDPointer,
		"verify.status_pointer": v.StatusPointer} {
		if p == "" {
			continue
		}
		if _, err := parsePointer(p); err != nil {
			bad(field, "%v", err)
		}
	}
	if v.FoundPointer == "" && v.ExternalIDPointer == "" {
		bad("verify", "needs found_pointer or external_id_pointer: how a found record is told from none")
	}
	seen := map[string]string{}
	for _, l := range []struct {
		field  string
		values []string
	}{{"verify.pending_values", v.PendingValues}, {"verify.failed_values", v.FailedValues}, {"verify.succeeded_values", v.SucceededValues}} {
		if len(l.values) > 0 && v.StatusPointer == "" {
			bad(l.field, "needs verify.status_pointer")
		}
		for _, s := range l.values {
			if s == "" {
				bad(l.field, "contains an empty value")
			} else if other, dup := seen[s]; dup && other != l.field {
				bad(l.field, "%q is also in %s", s, other)
			}
			seen[s] = l.field
		}
	}
	sort.Slice(problems, func(i, j int) bool {
		var a, b *ConfigError
		errors.As(problems[i], &a)
		errors.As(problems[j], &b)
		return a.Field < b.Field
	})
	return args, problems
}

var argRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_-]{0,63}$`)

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// parsePointer splits an RFC 6901 JSON pointer into its tokens.
func parsePointer(p string) ([]string, error) {
	if !strings.HasPrefix(p, "/") {
		return nil, fmt.Errorf("a JSON pointer starts with /, got %q", p)
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		if strings.Contains(strings.ReplaceAll(strings.ReplaceAll(s, "~0", ""), "~1", ""), "~") {
			return nil, fmt.Errorf("JSON pointer %q has a ~ that is not ~0 or ~1", p)
		}
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(s, "~1", "/"), "~0", "~")
	}
	return parts, nil
}
