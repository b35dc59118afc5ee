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
