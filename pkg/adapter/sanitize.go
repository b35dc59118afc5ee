package adapter

import (
	"strings"
	"unicode/utf8"

	"github.com/opledger/opledger/pkg/op"
)

// CategoryMalformedResponse: the vendor answered, but not in a form that can
// be read or stored; the outcome of a positive answer is then unknown.
const CategoryMalformedResponse = "malformed_response"

// maxVendorID bounds an identifier read from a vendor.
const maxVendorID = 255

// ValidVendorID reports whether a vendor's identifier may be stored and
// forwarded: at most 255 bytes of valid UTF-8 without control characters.
func ValidVendorID(s string) bool {
	if len(s) > maxVendorID || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

// Sanitize bounds what a vendor sent before it is stored or forwarded: an
// identifier that is too long, not UTF-8 or holds control characters makes
// a positive answer malformed (OutcomeUnknown: the effect may have happened,
// but we cannot record what the vendor said) and is dropped from any other;
// texts are clipped to valid UTF-8 without control characters.
func Sanitize(res Result) Result {
	if !ValidVendorID(res.ExternalObjectID) || !ValidVendorID(res.ExternalRequestID) {
		res.ExternalObjectID, res.ExternalRequestID = "", ""
		switch res.Outcome {
		case op.OutcomeSuccess, op.OutcomeNoop, op.OutcomeAcknowledged:
			res.Outcome, res.ErrorCategory = op.OutcomeUnknown, CategoryMalformedResponse
			res.Error = "the vendor answered with an identifier that is too long, not UTF-8 or holds control characters"
		}
	}
	res.Error, res.ErrorCategory = clipText(res.Error, 200), clipText(res.ErrorCategory, 64)
	return res
}

// clipText bounds a text the ledger stores: at most n bytes of valid UTF-8
// without control characters.
func clipText(s string, n int) string {
	s = strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToValidUTF8(s, "\uFFFD"))
	for len(s) > n {
		_, size := utf8.DecodeLastRuneInString(s)
		s = s[:len(s)-size]
	}
	return s
}

// CategoryCredentialEcho: the vendor answered with one of the credentials
// the adapter sent (a secret header echoed into a request id, say). The
// value is never stored; a positive answer whose object id held it is
// malformed (OutcomeUnknown).
const CategoryCredentialEcho = "credential_echo"

// minSecretMatch is the shortest secret looked for inside a vendor value;
// a shorter one (unusual for a credential) counts only as the whole value,
// so that a two-letter secret does not blank every identifier holding it.
const minSecretMatch = 8

// HoldsSecret reports whether v contains one of secrets, the credential
// values an adapter sends (see Redact).
func HoldsSecret(v string, secrets []string) bool {
	if v == "" {
		return false
	}
	for _, s := range secrets {
		switch {
		case s == "":
		case len(s) >= minSecretMatch && strings.Contains(v, s), v == s:
			return true
		}
	}
	return false
}

// RedactText replaces every secret inside s with "[redacted]".
func RedactText(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minSecretMatch {
			s = strings.ReplaceAll(s, sec, "[redacted]")
		} else if sec != "" && s == sec {
			return "[redacted]"
		}
	}
	return s
}

// Redact keeps the adapter's own credentials out of what a vendor sent
// back, before anything stores, logs or publishes it: a request id holding
// a secret is dropped; an object id holding one is dropped too and makes a
// positive answer malformed (OutcomeUnknown: the effect may have happened,
// and a lookup settles it); a secret inside an error text is replaced by
// "[redacted]". secrets are the values the adapter sends in its secret
// headers (each secret, and each header's whole value).
func Redact(res Result, secrets []string) Result {
	if len(secrets) == 0 {
		return res
	}
	if HoldsSecret(res.ExternalRequestID, secrets) {
		res.ExternalRequestID = ""
	}
	if HoldsSecret(res.ExternalObjectID, secrets) {
		res.ExternalObjectID = ""
		switch res.Outcome {
		case op.OutcomeSuccess, op.OutcomeNoop, op.OutcomeAcknowledged:
			res.Outcome, res.ErrorCategory = op.OutcomeUnknown, CategoryCredentialEcho
			res.Error = "the vendor answered with an object id that holds one of this tool's credentials; it is not stored"
		}
	}
	res.Error = RedactText(res.Error, secrets)
	return res
}

// Secrets is implemented by adapters that send credentials: the values a
// vendor's answer must never be kept with (Redact). A worker adds the
// call's sensitive arguments to them (registry.Tool.CallSecrets).
type Secrets interface {
	Secrets() []string
}
