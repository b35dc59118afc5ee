package api

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/pkg/wire"
)

// TokenEntry is one line of the tokens file: an actor, their role, and the
// SHA-256 (lowercase hex) of their bearer token. The token itself is never
// stored.
type TokenEntry struct {
	Actor  string   `yaml:"actor"`
	Role   ops.Role `yaml:"role"`
	SHA256 string   `yaml:"sha256"`
	// Tenant binds an agent token (role agent, the HTTP intent API) to
	// the tenant it submits into and reads ("default" for the default
	// tenant); required for agents, refused for every other role.
	Tenant string `yaml:"tenant,omitempty"`
	// WorkflowPrefix, for an agent token, narrows it to the workflows
	// whose ids start with it.
	WorkflowPrefix string `yaml:"workflow_prefix,omitempty"`
}

// Line is the entry as a line of the tokens file.
func (e TokenEntry) Line() string {
	scope := ""
	if e.Tenant != "" {
		scope += ", tenant: " + e.Tenant
	}
	if e.WorkflowPrefix != "" {
		scope += ", workflow_prefix: " + e.WorkflowPrefix
	}
	return fmt.Sprintf("- {actor: %s, role: %s%s, sha256: %s}", e.Actor, e.Role, scope, e.SHA256)
}

// Tokens are the configured API tokens, by hash.
type Tokens struct {
	entries []tokenEntry
}

type tokenEntry struct {
	actor ops.Actor
	sum   []byte // 32 bytes
}

// MaxTokenLen bounds a presented bearer token; a longer one is refused
// without being hashed.
const MaxTokenLen = 512

// maxTokensFile bounds the tokens file.
const maxTokensFile = 1 << 20

var (
	actorRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$`)
	hashRE  = regexp.MustCompile(`^[0-9a-f]{64}$`)
)

// NewTokens validates entries: each actor is 1-64 characters of letters,
// digits and . _ @ - (starting with a letter or digit), each role is
// viewer, approver, operator, admin, metrics or agent (an agent with its tenant and
// optional workflow prefix, see TokenEntry), each sha256 is 64 lowercase
// hex digits and appears once, and an actor listed more than once (a token
// being rotated) has one role (and one tenant and prefix). The error names every bad entry (1-based)
// and never holds a hash.
func NewTokens(entries []TokenEntry) (*Tokens, error) {
	t := &Tokens{}
	seen := map[string]int{}
	roles := map[string]ops.Actor{}
	var errs []error
	for i, e := range entries {
		n := i + 1
		switch {
		case !actorRE.MatchString(e.Actor):
			errs = append(errs, fmt.Errorf("entry %d: actor must be 1-64 letters, digits or . _ @ - starting with a letter or digit, got %q", n, clip(e.Actor)))
			continue
		case !ops.ValidRole(e.Role) && e.Role != ops.RoleAgent:
			errs = append(errs, fmt.Errorf("entry %d (%s): role must be viewer, approver, operator, admin, metrics or agent, got %q", n, e.Actor, clip(string(e.Role))))
			continue
		case agentScopeError(e) != "":
			errs = append(errs, fmt.Errorf("entry %d (%s): %s", n, e.Actor, agentScopeError(e)))
			continue
		case !hashRE.MatchString(e.SHA256):
			errs = append(errs, fmt.Errorf("entry %d (%s): sha256 must be 64 lowercase hex digits (opledger token prints it)", n, e.Actor))
			continue
		}
		if prev, ok := seen[e.SHA256]; ok {
			errs = append(errs, fmt.Errorf("entry %d (%s): the same token hash as entry %d", n, e.Actor, prev))
			continue
		}
		seen[e.SHA256] = n
		actor := ops.Actor{ID: e.Actor, Role: e.Role, Tenant: e.Tenant, WorkflowPrefix: e.WorkflowPrefix}
		if r, ok := roles[e.Actor]; ok && r != actor {
			errs = append(errs, fmt.Errorf("entry %d (%s): role %s%s, but an earlier entry gives %s the role %s%s", n, e.Actor, e.Role,
				scopeText(actor), e.Actor, r.Role, scopeText(r)))
			continue
		}
		roles[e.Actor] = actor
		sum, _ := hex.DecodeString(e.SHA256)
		t.entries = append(t.entries, tokenEntry{actor: actor, sum: sum})
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("api tokens: %w", errors.Join(errs...))
	}
	return t, nil
}

// ParseTokens reads a tokens file: a YAML list of entries (JSON, being
// YAML, works too), for example
//
//   - {actor: alice, role: approver, sha256: <64 hex digits>}
//   - {actor: oscar, role: operator, sha256: <64 hex digits>}
//
// Field names are exact, unknown and repeated fields are refused.
func ParseTokens(data []byte) ([]TokenEntry, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	var entries []TokenEntry
	if err := dec.Decode(&entries); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("api tokens: %w", err)
	}
	var extra any
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("api tokens: one YAML document expected")
	}
	return entries, nil
}

// ReadTokens reads and parses the tokens file at path.
func ReadTokens(path string) ([]TokenEntry, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("api tokens: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxTokensFile+1))
	if err != nil {
		return nil, fmt.Errorf("api tokens: read %s: %w", path, err)
	}
	if len(data) > maxTokensFile {
		return nil, fmt.Errorf("api tokens: %s is larger than %d bytes", path, maxTokensFile)
	}
	entries, err := ParseTokens(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return entries, nil
}

// LoadTokens reads the tokens file at path and validates it.
func LoadTokens(path string) (*Tokens, error) {
	entries, err := ReadTokens(path)
	if err != nil {
		return nil, err
	}
	t, err := NewTokens(entries)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// Len is the number of tokens.
func (t *Tokens) Len() int { return len(t.entries) }

// Lookup returns the actor whose token this is. It hashes the token and
// compares the hash with every entry in constant time, so neither the
// answer's timing nor its path depends on how much of a hash matched.
func (t *Tokens) Lookup(token string) (ops.Actor, bool) {
	if t == nil || token == "" || len(token) > MaxTokenLen {
		return ops.Actor{}, false
	}
	sum := sha256.Sum256([]byte(token))
	var found ops.Actor
	ok := 0
	for _, e := range t.entries {
		match := subtle.ConstantTimeCompare(sum[:], e.sum)
		if match == 1 {
			found = e.actor
		}
		ok |= match
	}
	return found, ok == 1
}

// HashToken is the tokens file's sha256 of a token.
func HashToken(token string) string {
	sum := sha256.Sum256([]byte(token))
	return hex.EncodeToString(sum[:])
}

// TokenPrefix starts every token GenerateToken makes, so that a leaked one
// is recognisable (secret scanners, logs).
const TokenPrefix = "opl_"

// GenerateToken returns a new random token (256 bits from crypto/rand) and
// its tokens-file entry for actor and role.
func GenerateToken(actor string, role ops.Role) (token string, entry TokenEntry, err error) {
	return GenerateTokenFor(TokenEntry{Actor: actor, Role: role})
}

// GenerateAgentToken is GenerateToken for an agent of tenant, optionally
// bound to the workflows starting with workflowPrefix.
func GenerateAgentToken(actor, tenant, workflowPrefix string) (token string, entry TokenEntry, err error) {
	return GenerateTokenFor(TokenEntry{Actor: actor, Role: ops.RoleAgent, Tenant: tenant, WorkflowPrefix: workflowPrefix})
}

// GenerateTokenFor returns a new random token and e with its hash: e's
// actor, role and scope are checked as NewTokens checks them.
func GenerateTokenFor(e TokenEntry) (token string, entry TokenEntry, err error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", TokenEntry{}, fmt.Errorf("generate token: %w", err)
	}
	token = TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
	entry = e
	entry.SHA256 = HashToken(token)
	if _, err := NewTokens([]TokenEntry{entry}); err != nil {
		return "", TokenEntry{}, err
	}
	return token, entry, nil
}

func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

// agentScopeError says what is wrong with an entry's tenant and workflow
// prefix, or "": an agent needs a tenant and may have a prefix; no other
// role has either.
func agentScopeError(e TokenEntry) string {
	if e.Role != ops.RoleAgent {
		if e.Tenant != "" || e.WorkflowPrefix != "" {
			return "only an agent token has a tenant or a workflow_prefix"
		}
		return ""
	}
	switch {
	case !wire.ValidTenant(e.Tenant):
		return fmt.Sprintf("an agent token needs its tenant (1-63 lower-case letters, digits, _ or -; default for the default tenant), got %q", clip(e.Tenant))
	case e.WorkflowPrefix != "" && !wire.ValidWorkflowID(e.WorkflowPrefix):
		return fmt.Sprintf("workflow_prefix must be the start of a workflow id (printable, no '.', '*', '>' or spaces), got %q", clip(e.WorkflowPrefix))
	}
	return ""
}

// scopeText describes an agent's binding for an error message.
func scopeText(a ops.Actor) string {
	if a.Role != ops.RoleAgent {
		return ""
	}
	s := " of tenant " + a.Tenant
	if a.WorkflowPrefix != "" {
		s += " and workflows " + a.WorkflowPrefix + "*"
	}
	return s
}
