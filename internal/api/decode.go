package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

// maxBody bounds a request body: the largest legitimate one is a reason
// of 500 characters (2 KiB of UTF-8) with a hash or an object id.
const maxBody = 16 << 10

// readBody reads the body of r, which serve bounds to maxBody bytes
// (errTooLarge past it).
func readBody(r *http.Request) ([]byte, error) {
	data, err := io.ReadAll(r.Body)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		return nil, fmt.Errorf("the body is larger than %d bytes: %w", maxBody, errTooLarge)
	}
	if err != nil {
		return nil, fmt.Errorf("read body: %w", err)
	}
	return data, nil
}

// decodeFields reads body strictly as one JSON object whose members are
// strings named in fields: exact names (case included), each at most once,
// no others, valid UTF-8 without unpaired surrogate escapes, nothing but
// white space after it. It is the reading the whole system does of what it
// is sent: whatever a proxy in front of the API makes of a body, the API
// makes the same or refuses it. Errors wrap op.ErrInvalid.
func decodeFields(body []byte, fields ...string) (map[string]string, error) {
	invalid := func(format string, a ...any) error {
		return withReason(ReasonInvalidBody, fmt.Errorf("body: "+format+": %w", append(a, op.ErrInvalid)...))
	}
	if !utf8.Valid(body) {
		return nil, invalid("not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, invalid("must be a JSON object with the fields %s", strings.Join(fields, ", "))
	}
	out := map[string]string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, invalid("not JSON")
		}
		name, _ := tok.(string)
		if !slices.Contains(fields, name) {
			for _, f := range fields {
				if strings.EqualFold(f, name) {
					return nil, invalid("unknown field %q (field names are case-sensitive: %q)", wire.Clip(name), f)
				}
			}
			return nil, invalid("unknown field %q (the fields are %s)", wire.Clip(name), strings.Join(fields, ", "))
		}
		if _, dup := out[name]; dup {
			return nil, invalid("field %q appears more than once", name)
		}
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return nil, invalid("not JSON")
		}
		if len(raw) == 0 || raw[0] != '"' {
			return nil, invalid("field %q must be a string", name)
		}
		if loneSurrogate(raw) {
			return nil, invalid("field %q holds an unpaired UTF-16 surrogate escape", name)
		}
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, invalid("field %q must be a string", name)
		}
		out[name] = s
	}
	if _, err := dec.Token(); err != nil {
		return nil, invalid("not JSON")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, invalid("only white space may follow the object")
	}
	return out, nil
}

// loneSurrogate reports whether the JSON string literal raw has a \u escape
// of a UTF-16 surrogate that is not a high one followed by a low one, which
// encoding/json would silently turn into U+FFFD.
func loneSurrogate(raw []byte) bool {
	for i := 0; i+1 < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] != 'u' {
			i++ // \" \\ and the others
			continue
		}
		r, ok := hex4(raw, i+2)
		if !ok {
			return false // malformed: json.Unmarshal refuses it
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if i+11 >= len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return true
			}
			lo, ok := hex4(raw, i+8)
			if !ok || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

func hex4(b []byte, at int) (rune, bool) {
	if at+4 > len(b) {
		return 0, false
	}
	n, err := strconv.ParseUint(string(b[at:at+4]), 16, 16)
	return rune(n), err == nil
}

// listFilter reads the query of GET /v1/operations strictly: only the
// known parameters, each once. Errors wrap op.ErrInvalid.
func listFilter(q url.Values) (store.Filter, error) {
	var f store.Filter
	invalid := func(format string, a ...any) error {
		return withReason(ReasonInvalidQuery, fmt.Errorf(format+": %w", append(a, op.ErrInvalid)...))
	}
	for name, vs := range q {
		if len(vs) != 1 {
			return f, invalid("query parameter %q appears more than once", wire.Clip(name))
		}
		v := vs[0]
		switch name {
		case "state":
			f.State = op.State(v)
			if !f.State.Valid() {
				return f, invalid("state %q is not a state", wire.Clip(v))
			}
		case "tool":
			if !wire.ValidText(v, wire.MaxIDLen) || v == "" {
				return f, invalid("tool must be 1-%d printable characters", wire.MaxIDLen)
			}
			f.Tool = v
		case "workflow_id":
			if !wire.ValidText(v, wire.MaxIDLen) || v == "" {
				return f, invalid("workflow_id must be 1-%d printable characters", wire.MaxIDLen)
			}
			f.WorkflowID = v
		case "older_than":
			d, err := time.ParseDuration(v)
			if err != nil || d <= 0 {
				return f, invalid("older_than must be a positive duration such as 15m or 2h, got %q", wire.Clip(v))
			}
			f.OlderThan = d
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxLimit {
				return f, invalid("limit must be an integer from 1 to %d, got %q", maxLimit, wire.Clip(v))
			}
			f.Limit = n
		default:
			return f, invalid("unknown query parameter %q (the parameters are state, tool, workflow_id, older_than, limit)", wire.Clip(name))
		}
	}
	return f, nil
}

// maxLimit is the most operations one list returns (the store's cap).
const maxLimit = 1000

var providerRE = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,62}$`)

// evidenceStatuses are the statuses GET /v1/webhooks filters by; "flagged"
// stands for those a person should look at, "all" for every one.
var evidenceStatuses = []string{store.EvidenceHeld, store.EvidenceApplied, store.EvidenceConfirmed, store.EvidenceOutOfBand,
	store.EvidenceContradicted, store.EvidenceExpired}

// evidenceFilter reads GET /v1/webhooks's query: status (default flagged),
// provider and limit, each at most once.
func evidenceFilter(q url.Values) (store.EvidenceFilter, error) {
	f := store.EvidenceFilter{Statuses: store.EvidenceFlagged}
	invalid := func(format string, a ...any) error {
		return fmt.Errorf(format+": %w", append(a, op.ErrInvalid)...)
	}
	for name, vs := range q {
		if len(vs) != 1 {
			return f, invalid("query parameter %q appears more than once", wire.Clip(name))
		}
		v := vs[0]
		switch name {
		case "status":
			switch {
			case v == "flagged":
				f.Statuses = store.EvidenceFlagged
			case v == "all":
				f.Statuses = nil
			case slices.Contains(evidenceStatuses, v):
				f.Statuses = []string{v}
			default:
				return f, invalid("status must be flagged, all or one of %s, got %q", strings.Join(evidenceStatuses, ", "), wire.Clip(v))
			}
		case "provider":
			if !providerRE.MatchString(v) {
				return f, invalid("provider must be a provider name, got %q", wire.Clip(v))
			}
			f.Provider = v
		case "limit":
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > maxLimit {
				return f, invalid("limit must be an integer from 1 to %d, got %q", maxLimit, wire.Clip(v))
			}
			f.Limit = n
		default:
			return f, invalid("unknown query parameter %q (the parameters are status, provider, limit)", wire.Clip(name))
		}
	}
	return f, nil
}
