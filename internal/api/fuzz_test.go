package api

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
)

// decodeFields never panics, refuses with op.ErrInvalid, and agrees with a
// lenient reading on what it accepts: the same fields, the same strings,
// all valid UTF-8 (so a proxy reading the body leniently sees what the API
// acts on).
func FuzzDecodeFields(f *testing.F) {
	for _, s := range []string{
		`{"reason":"ok","args_hash":"ab"}`, `{"reason":"a","reason":"b"}`, `{"Reason":"x"}`, `{"reason":1}`,
		`{"reason":"\ud800"}`, `{"reason":"\ud83d\ude00"}`, "{\"reason\":\"\xff\"}", `{"reason":"x"} {}`, `{"other":"x"}`,
		`[]`, ``, `{"reason":"x"`, `{"reason":"x",}`, ` {"reason":"\u0000"} `,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got, err := decodeFields(body, "args_hash", "reason")
		if err != nil {
			if !errors.Is(err, op.ErrInvalid) {
				t.Fatalf("refusal without op.ErrInvalid: %v", err)
			}
			if refusalReason(err, "") != ReasonInvalidBody {
				t.Fatalf("refusal without its reason: %v", err)
			}
			return
		}
		var lenient map[string]string
		if err := json.Unmarshal(body, &lenient); err != nil {
			t.Fatalf("accepted %q, which encoding/json refuses: %v", body, err)
		}
		if len(lenient) != len(got) {
			t.Fatalf("accepted %q as %v, lenient reading %v", body, got, lenient)
		}
		for k, v := range got {
			if lenient[k] != v || !utf8.ValidString(v) {
				t.Fatalf("field %q: %q, lenient %q", k, v, lenient[k])
			}
			if k != "args_hash" && k != "reason" {
				t.Fatalf("accepted unknown field %q", k)
			}
		}
	})
}

// listFilter never panics, refuses with op.ErrInvalid and the query
// reason, and what it accepts is within bounds.
func FuzzListFilter(f *testing.F) {
	for _, s := range []string{"state=escalated&tool=t&workflow_id=wf&older_than=15m&limit=10", "state=bogus", "limit=0",
		"limit=1001", "limit=x", "older_than=-1m", "state=a&state=b", "tool=", "%zz", "sort=age", "workflow_id=%00",
		"older_than=9999999999h", "limit=+5", "limit=0x10"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return // the API answers a malformed query 400 before listFilter
		}
		fl, err := listFilter(q)
		if err != nil {
			if !errors.Is(err, op.ErrInvalid) || refusalReason(err, "") != ReasonInvalidQuery {
				t.Fatalf("refusal %v", err)
			}
			return
		}
		if fl.Limit < 0 || fl.Limit > maxLimit || fl.OlderThan < 0 || (fl.State != "" && !fl.State.Valid()) {
			t.Fatalf("accepted %q as %+v", raw, fl)
		}
	})
}

// ParseTokens never panics, and entries it reads are either accepted by
// NewTokens or refused with a message that holds no hash.
func FuzzParseTokens(f *testing.F) {
	const hash = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	for _, s := range []string{
		"- {actor: alice, role: approver, sha256: " + hash + "}\n",
		"- {actor: alice, role: approver, sha256: " + hash + ", sha256: " + hash + "}\n",
		"- {actor: alice, role: approver, sha256: " + hash + ", extra: 1}\n",
		`[{"actor":"a","role":"admin","sha256":"` + hash + `"}]`,
		"---\n- {actor: a}\n---\n- {actor: b}\n", "", "{}", "- !!binary aGVsbG8=", "&a [*a]", "- {actor: prom, role: metrics, sha256: " + hash + "}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		entries, err := ParseTokens(data)
		if err != nil {
			return
		}
		if _, err := NewTokens(entries); err != nil {
			for _, e := range entries {
				if len(e.SHA256) >= 16 && strings.Contains(err.Error(), e.SHA256) {
					t.Fatalf("a refusal quotes a hash: %v", err)
				}
			}
		}
	})
}

// evidenceFilter (GET /v1/webhooks) never panics, refuses with
// op.ErrInvalid, and what it accepts is within bounds: known statuses, a
// provider name, a limit from 1 to maxLimit (0: the default).
func FuzzEvidenceFilter(f *testing.F) {
	for _, s := range []string{"status=flagged&provider=stripe&limit=10", "status=all", "status=held", "status=bogus",
		"provider=Stripe", "provider=../x", "limit=0", "limit=1001", "limit=-1", "status=a&status=b", "sort=age",
		"provider=%00", "%zz", "limit=+5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		q, err := url.ParseQuery(raw)
		if err != nil {
			return // the API answers a malformed query 400 before evidenceFilter
		}
		fl, err := evidenceFilter(q)
		if err != nil {
			if !errors.Is(err, op.ErrInvalid) {
				t.Fatalf("refusal %v", err)
			}
			return
		}
		if fl.Limit < 0 || fl.Limit > maxLimit || (fl.Provider != "" && !providerRE.MatchString(fl.Provider)) {
			t.Fatalf("accepted %q as %+v", raw, fl)
		}
		for _, s := range fl.Statuses {
			if !slices.Contains(evidenceStatuses, s) {
				t.Fatalf("accepted %q with status %q", raw, s)
			}
		}
	})
}

// The intent API's query (POST /v1/intents?wait=…) never panics: unknown
// parameters, repeats and bad durations are refused with the query reason,
// and an accepted wait is never negative nor beyond the configured bound.
func FuzzIntentQuery(f *testing.F) {
	for _, s := range []string{"wait=final", "wait=10s", "wait=-1s", "wait=9999999h", "wait=1s&wait=2s", "wait=",
		"timeout=5s", "wait=1e3s", "%zz", "wait=final&x=1", "wait=1.5m"} {
		f.Add(s)
	}
	in := &Intents{cfg: IntentsConfig{Wait: 30 * time.Second}}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest(http.MethodPost, "/v1/intents", nil)
		r.URL.RawQuery = raw
		q, err := query(r, "wait")
		if err == nil {
			var wait time.Duration
			if wait, err = in.intentWait(q); err == nil {
				if wait < 0 || wait > in.cfg.Wait {
					t.Fatalf("accepted %q as a wait of %v", raw, wait)
				}
				return
			}
		}
		if !errors.Is(err, op.ErrInvalid) || refusalReason(err, "") != ReasonInvalidQuery {
			t.Fatalf("refusal of %q: %v", raw, err)
		}
	})
}
