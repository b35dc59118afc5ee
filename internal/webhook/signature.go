package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/registry"
)

// Secret is one signing secret of a provider. It never prints its value:
// String and a log line show only which scheme it is for.
type Secret struct {
	key    []byte
	scheme string
}

// String hides the secret.
func (s Secret) String() string { return "[" + s.scheme + " secret]" }

// GoString hides the secret from %#v as well.
func (s Secret) GoString() string { return s.String() }

// MarshalText hides the secret from encoders (a log field, JSON).
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// ParseSecrets reads a provider's signing secrets for its scheme: for
// Standard Webhooks "whsec_<base64>" (the key is the decoded bytes), for
// Stripe the secret as written (Stripe signs with the whole "whsec_…"
// string). Several secrets make rotation possible: a delivery signed with
// any of them is accepted. Errors name the secret by position, never by
// value.
func ParseSecrets(scheme string, values []string) ([]Secret, error) {
	var out []Secret
	for i, v := range values {
		if v == "" {
			continue
		}
		if strings.ContainsAny(v, " \t\r\n") || !printable(v) {
			return nil, fmt.Errorf("secret %d: holds white space or control characters", i+1)
		}
		switch scheme {
		case registry.SchemeStandardWebhooks:
			b64, ok := strings.CutPrefix(v, "whsec_")
			if !ok {
				return nil, fmt.Errorf("secret %d: a Standard Webhooks secret is whsec_<base64 key>", i+1)
			}
			key, err := base64.StdEncoding.DecodeString(b64)
			if err != nil {
				return nil, fmt.Errorf("secret %d: the part after whsec_ is not base64", i+1)
			}
			if len(key) < 16 {
				return nil, fmt.Errorf("secret %d: the key is %d bytes; at least 16 are needed", i+1, len(key))
			}
			out = append(out, Secret{key: key, scheme: scheme})
		case registry.SchemeStripe:
			if len(v) < 16 {
				return nil, fmt.Errorf("secret %d: a Stripe signing secret is at least 16 characters (whsec_…)", i+1)
			}
			out = append(out, Secret{key: []byte(v), scheme: scheme})
		default:
			return nil, fmt.Errorf("unknown scheme %q", scheme)
		}
	}
	return out, nil
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Header names of the schemes.
const (
	HeaderWebhookID        = "webhook-id"
	HeaderWebhookTimestamp = "webhook-timestamp"
	HeaderWebhookSignature = "webhook-signature"
	HeaderStripeSignature  = "Stripe-Signature"
)

// Bounds on what the signature headers may hold.
const (
	maxSignatureHeader = 4096
	maxSignatures      = 16
	maxIDLen           = 255
)

// standardSignatures parses a webhook-signature header: space-separated
// "<version>,<base64>" entries. Only v1 entries count; others (a future
// scheme) are skipped. It returns the decoded v1 signatures, or the reason
// the header is unusable.
func standardSignatures(h string) ([][]byte, string) {
	if h == "" {
		return nil, ReasonMissingSignature
	}
	if len(h) > maxSignatureHeader {
		return nil, ReasonMalformedSignature
	}
	var sigs [][]byte
	for _, entry := range strings.Fields(h) {
		version, sig, ok := strings.Cut(entry, ",")
		if !ok {
			return nil, ReasonMalformedSignature
		}
		if version != "v1" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(sig)
		if err != nil || len(raw) != sha256.Size {
			return nil, ReasonMalformedSignature
		}
		if sigs = append(sigs, raw); len(sigs) > maxSignatures {
			return nil, ReasonMalformedSignature
		}
	}
	if len(sigs) == 0 {
		return nil, ReasonMissingSignature
	}
	return sigs, ""
}

// stripeSignature parses a Stripe-Signature header: comma-separated
// "key=value" pairs, exactly one t (unix seconds) and one or more v1 (hex
// HMAC-SHA256); other keys (v0, a future scheme) are skipped.
// The timestamp is returned as written too: it is signed as it was sent.
func stripeSignature(h string) (ts int64, raw string, sigs [][]byte, reason string) {
	if h == "" {
		return 0, "", nil, ReasonMissingSignature
	}
	if len(h) > maxSignatureHeader {
		return 0, "", nil, ReasonMalformedSignature
	}
	seenT := false
	for _, pair := range strings.Split(h, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok {
			return 0, "", nil, ReasonMalformedSignature
		}
		switch k {
		case "t":
			t, r := parseTimestamp(v)
			if r != "" || seenT {
				return 0, "", nil, ReasonMalformedTimestamp
			}
			ts, raw, seenT = t, v, true
		case "v1":
			sig, err := hex.DecodeString(v)
			if err != nil || len(sig) != sha256.Size {
				return 0, "", nil, ReasonMalformedSignature
			}
			if sigs = append(sigs, sig); len(sigs) > maxSignatures {
				return 0, "", nil, ReasonMalformedSignature
			}
		}
	}
	switch {
	case !seenT:
		return 0, "", nil, ReasonMissingTimestamp
	case len(sigs) == 0:
		return 0, "", nil, ReasonMissingSignature
	}
	return ts, raw, sigs, ""
}

// parseTimestamp reads unix seconds: decimal digits only, no sign.
func parseTimestamp(v string) (int64, string) {
	if v == "" {
		return 0, ReasonMissingTimestamp
	}
	if len(v) > 12 {
		return 0, ReasonMalformedTimestamp
	}
	for i := 0; i < len(v); i++ {
		if v[i] < '0' || v[i] > '9' {
			return 0, ReasonMalformedTimestamp
		}
	}
	t, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, ReasonMalformedTimestamp
	}
	return t, ""
}

// anyMatches reports whether one of sigs is the HMAC-SHA256 of signed under
// one of secrets, comparing in constant time.
func anyMatches(secrets []Secret, signed []byte, sigs [][]byte) bool {
	match := false
	for _, s := range secrets {
		mac := hmac.New(sha256.New, s.key)
		mac.Write(signed)
		want := mac.Sum(nil)
		for _, sig := range sigs {
			// Every pair is compared, so the time taken says nothing
			// about which one matched.
			if hmac.Equal(want, sig) {
				match = true
			}
		}
	}
	return match
}

// checkTime says whether ts (unix seconds) is within tolerance of now.
func checkTime(ts int64, now time.Time, tolerance time.Duration) string {
	d := now.Sub(time.Unix(ts, 0))
	switch {
	case d > tolerance:
		return ReasonStaleTimestamp
	case -d > tolerance:
		return ReasonFutureTimestamp
	}
	return ""
}

// verified is what a valid signature vouches for.
type verified struct {
	// id is the delivery id the headers carry (Standard Webhooks); ""
	// when the payload carries it (Stripe).
	id string
}

// verify checks a delivery's signature over its raw body under the
// provider's scheme and secrets, then its timestamp. It returns the reason
// of a refusal, "" when the delivery is authentic and fresh.
func verify(w *registry.Webhook, secrets []Secret, header func(string) []string, body []byte, now time.Time) (verified, string) {
	one := func(name string) (string, bool) {
		vs := header(name)
		if len(vs) > 1 {
			return "", false
		}
		if len(vs) == 0 {
			return "", true
		}
		return vs[0], true
	}
	switch w.Scheme {
	case registry.SchemeStandardWebhooks:
		id, ok1 := one(HeaderWebhookID)
		tsv, ok2 := one(HeaderWebhookTimestamp)
		sigh, ok3 := one(HeaderWebhookSignature)
		switch {
		case !ok1 || !ok2 || !ok3:
			return verified{}, ReasonRepeatedHeader
		case sigh == "":
			return verified{}, ReasonMissingSignature
		case id == "":
			return verified{}, ReasonMissingID
		case len(id) > maxIDLen || !printable(id) || strings.ContainsRune(id, ' '):
			return verified{}, ReasonInvalidID
		}
		ts, r := parseTimestamp(tsv)
		if r != "" {
			return verified{}, r
		}
		sigs, r := standardSignatures(sigh)
		if r != "" {
			return verified{}, r
		}
		signed := make([]byte, 0, len(id)+len(tsv)+len(body)+2)
		signed = append(append(append(append(append(signed, id...), '.'), tsv...), '.'), body...)
		if !anyMatches(secrets, signed, sigs) {
			return verified{}, ReasonBadSignature
		}
		if r := checkTime(ts, now, w.Tolerance); r != "" {
			return verified{}, r
		}
		return verified{id: id}, ""
	case registry.SchemeStripe:
		h, ok := one(HeaderStripeSignature)
		if !ok {
			return verified{}, ReasonRepeatedHeader
		}
		ts, tsv, sigs, r := stripeSignature(h)
		if r != "" {
			return verified{}, r
		}
		signed := make([]byte, 0, len(tsv)+len(body)+1)
		signed = append(append(append(signed, tsv...), '.'), body...)
		if !anyMatches(secrets, signed, sigs) {
			return verified{}, ReasonBadSignature
		}
		if r := checkTime(ts, now, w.Tolerance); r != "" {
			return verified{}, r
		}
		return verified{}, ""
	}
	return verified{}, ReasonUnknownProvider
}
