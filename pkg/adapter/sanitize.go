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

// Secrets is implemented by adapters that send credentials: the values a
// vendor's answer must never be kept with (Scrub).
type Secrets interface {
	Secrets() []string
}

// minSecret is the shortest secret Scrub looks for: shorter ones would match
// ordinary text.
const minSecret = 4

// Scrub keeps what a vendor sent from carrying a secret of the call (a
// credential the adapter sent, a sensitive argument): a vendor that echoes
// one must not have it stored, logged or published to the agent. A request
// id holding one is dropped; an object id holding one is dropped too, and a
// positive answer then becomes malformed (OutcomeUnknown, as for an
// unreadable id: the effect may have happened); a secret in an error text
// or category is masked.
func Scrub(res Result, secrets []string) Result {
	holds := func(s string) bool {
		for _, sec := range secrets {
			if len(sec) >= minSecret && strings.Contains(s, sec) {
				return true
			}
		}
		return false
	}
	if holds(res.ExternalRequestID) {
		res.ExternalRequestID = ""
	}
	if holds(res.ExternalObjectID) {
		res.ExternalObjectID = ""
		switch res.Outcome {
		case op.OutcomeSuccess, op.OutcomeNoop, op.OutcomeAcknowledged:
			res.Outcome, res.ErrorCategory = op.OutcomeUnknown, CategoryMalformedResponse
			res.Error = "the vendor answered with an identifier that holds a secret of the call; it is not kept"
		}
	}
	res.Error, res.ErrorCategory = mask(res.Error, secrets), mask(res.ErrorCategory, secrets)
	return res
}

// ScrubLookup is Scrub for a lookup's answer: ok is false when the found
// record's id holds a secret of the call, which is then no evidence.
func ScrubLookup(lr LookupResult, secrets []string) (LookupResult, bool) {
	for _, sec := range secrets {
		if len(sec) >= minSecret && strings.Contains(lr.ExternalObjectID, sec) {
			return LookupResult{HTTPStatus: lr.HTTPStatus}, false
		}
	}
	return lr, true
}

// ScrubText masks every secret in s.
func ScrubText(s string, secrets []string) string { return mask(s, secrets) }

func mask(s string, secrets []string) string {
	for _, sec := range secrets {
		if len(sec) >= minSecret {
			s = strings.ReplaceAll(s, sec, "***")
		}
	}
	return s
}
