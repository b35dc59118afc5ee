package canon

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// maxExactDigits is the longest integer (in decimal digits) that a literal
// with a fraction or an exponent is expanded to exactly. It matches the range
// in which ES6 prints numbers without an exponent (below 1e21).
const maxExactDigits = 21

var errNumberRange = errors.New("number is outside the range of a 64-bit float")

// isIntegerLiteral reports whether a valid JSON number literal has neither a
// fraction nor an exponent.
func isIntegerLiteral(lit string) bool {
	return !strings.ContainsAny(lit, ".eE")
}

// canonicalNumber returns the canonical text of a valid JSON number literal:
//
//   - an integer literal is kept exactly, whatever its size ("-0" becomes "0");
//   - a literal with a fraction or exponent whose value is an integer of at
//     most 21 digits is written as that integer, exactly ("4.9e3" → "4900");
//   - any other value is rounded to the nearest float64 and printed the way
//     ES6 Number.prototype.toString does (RFC 8785 §3.2.2.3). A value beyond
//     the float64 range, or a non-zero value that rounds to zero, is an error.
func canonicalNumber(lit string) (string, error) {
	neg := strings.HasPrefix(lit, "-")
	body := strings.TrimPrefix(lit, "-")
	if isIntegerLiteral(body) {
		if body == "0" {
			return "0", nil
		}
		return lit, nil
	}
	intPart, rest := body, ""
	if i := strings.IndexAny(body, ".eE"); i >= 0 {
		intPart, rest = body[:i], body[i:]
	}
	var frac, exp string
	if strings.HasPrefix(rest, ".") {
		frac = rest[1:]
		if i := strings.IndexAny(frac, "eE"); i >= 0 {
			frac, exp = frac[:i], frac[i+1:]
		}
	} else if rest != "" {
		exp = rest[1:]
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" {
		return "0", nil
	}
	// value = digits × 10^shift
	shift := parseExponent(exp) - int64(len(frac))
	trimmed := strings.TrimRight(digits, "0")
	shift += int64(len(digits) - len(trimmed))
	digits = trimmed
	if shift >= 0 && int64(len(digits))+shift <= maxExactDigits {
		var b strings.Builder
		if neg {
			b.WriteByte('-')
		}
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", int(shift)))
		return b.String(), nil
	}
	f, err := strconv.ParseFloat(lit, 64)
	if err != nil || math.IsInf(f, 0) || f == 0 {
		return "", errNumberRange
	}
	return formatES6(f), nil
}

// parseExponent parses an optionally signed decimal exponent, saturating far
// beyond any float64 exponent instead of overflowing.
func parseExponent(s string) int64 {
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimLeft(s, "+-")
	var n int64
	for _, c := range s {
		n = n*10 + int64(c-'0')
		if n > 1<<40 {
			n = 1 << 40
			break
		}
	}
	if neg {
		return -n
	}
	return n
}

// formatES6 prints a finite float64 like ES6 Number.prototype.toString: the
// shortest digits that round-trip, without an exponent for 1e-7 < |f| < 1e21.
func formatES6(f float64) string {
	if f == 0 {
		return "0"
	}
	var b strings.Builder
	if f < 0 {
		b.WriteByte('-')
		f = -f
	}
	s := strconv.FormatFloat(f, 'e', -1, 64) // d[.ddd]e±xx
	mant, expText, _ := strings.Cut(s, "e")
	digits := strings.Replace(mant, ".", "", 1)
	e, _ := strconv.Atoi(expText)
	n := e + 1 // position of the decimal point relative to the digits
	k := len(digits)
	switch {
	case k <= n && n <= 21:
		b.WriteString(digits)
		b.WriteString(strings.Repeat("0", n-k))
	case 0 < n && n <= 21:
		b.WriteString(digits[:n])
		b.WriteByte('.')
		b.WriteString(digits[n:])
	case -6 < n && n <= 0:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", -n))
		b.WriteString(digits)
	default:
		b.WriteByte(digits[0])
		if k > 1 {
			b.WriteByte('.')
			b.WriteString(digits[1:])
		}
		b.WriteByte('e')
		if n-1 >= 0 {
			b.WriteByte('+')
		}
		b.WriteString(strconv.Itoa(n - 1))
	}
	return b.String()
}
