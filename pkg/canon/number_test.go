package canon

import (
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"unicode/utf16"

	"github.com/stretchr/testify/require"
)

func TestCanonicalNumber(t *testing.T) {
	t.Parallel()

	for lit, want := range map[string]string{
		// Integer literals: exact, whatever the size.
		"0":                        "0",
		"-0":                       "0",
		"7":                        "7",
		"-7":                       "-7",
		"9007199254740993":         "9007199254740993",
		"12345678901234567890123":  "12345678901234567890123",
		"-12345678901234567890123": "-12345678901234567890123",
		"1" + zeros(400):           "1" + zeros(400),
		// Integer values written with a fraction or exponent, up to 21 digits.
		"4900.0":                  "4900",
		"4.9e3":                   "4900",
		"49E2":                    "4900",
		"4.9E+3":                  "4900",
		"100e-2":                  "1",
		"0.1e1":                   "1",
		"-0.0":                    "0",
		"0e999999999999999999999": "0",
		"0.000e-5":                "0",
		"9007199254740993.0":      "9007199254740993",
		"999999999999999999999.0": "999999999999999999999",
		"1.2345678901234568e20":   "123456789012345680000",
		// Everything else: nearest float64, ES6 formatting.
		"0.5":                        "0.5",
		"-0.5":                       "-0.5",
		"4.50":                       "4.5",
		"0.1":                        "0.1",
		"0.30000000000000004":        "0.30000000000000004",
		"333333333.33333329":         "333333333.3333333",
		"2e-3":                       "0.002",
		"0.000001":                   "0.000001",
		"0.0000001":                  "1e-7",
		"1.5e-7":                     "1.5e-7",
		"1e21":                       "1e+21",
		"1.0e21":                     "1e+21",
		"1E30":                       "1e+30",
		"-1.5e300":                   "-1.5e+300",
		"123456789012345678901234.5": "1.2345678901234569e+23",
		"5e-324":                     "5e-324",
		"1.7976931348623157e308":     "1.7976931348623157e+308",
		"2.2250738585072014e-308":    "2.2250738585072014e-308",
		"0.1" + zeros(500) + "1":     "0.1",
	} {
		got, err := canonicalNumber(lit)
		require.NoError(t, err, lit)
		require.Equal(t, want, got, lit)
		again, err := canonicalNumber(got)
		require.NoError(t, err, lit)
		require.Equal(t, got, again, "idempotent: %s", lit)
	}
	for _, lit := range []string{"1e309", "-1e309", "1.8e308", "1e-400", "-2e-324", "1e99999999999999999999", "1e-99999999999999999999"} {
		_, err := canonicalNumber(lit)
		require.ErrorIs(t, err, errNumberRange, lit)
	}
}

func zeros(n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = '0'
	}
	return string(b)
}

// TestFormatES6RoundTrips checks random doubles: the output parses back to
// the same float64, has the ES6 shape, and canonicalizes to itself.
func TestFormatES6RoundTrips(t *testing.T) {
	t.Parallel()

	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := math.Float64frombits(r.Uint64())
		if math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		s := formatES6(f)
		back, err := strconv.ParseFloat(s, 64)
		require.NoError(t, err, s)
		require.Equal(t, f == 0, back == 0, s)
		if f != 0 {
			require.Equal(t, f, back, s)
		}
		abs := math.Abs(f)
		hasExp := slices.Contains([]byte(s), 'e')
		require.Equal(t, abs != 0 && (abs < 1e-6 || abs >= 1e21), hasExp, s)

		again, err := canonicalNumber(s)
		if err == nil {
			require.Equal(t, s, again, "%v", f)
		} else {
			// Only subnormals that print as fewer digits than they need
			// could underflow; the shortest round-trip form never does.
			t.Fatalf("%s: %v", s, err)
		}
	}
}

func TestCompareUTF16(t *testing.T) {
	t.Parallel()

	units := func(s string) []uint16 { return utf16.Encode([]rune(s)) }
	words := []string{"", "a", "ab", "b", "\r", "1", "\u0080", "ö", "€", "\uff21", "\ue000", "\ud7ff", "😀", "😀a", "\U0010ffff", "𐀀", "a😀", "a\uffff"}
	for _, a := range words {
		for _, b := range words {
			want := slices.Compare(units(a), units(b))
			got := compareUTF16(a, b)
			require.Equal(t, want, sign(got), "%q vs %q", a, b)
		}
	}
}

func sign(n int) int {
	switch {
	case n < 0:
		return -1
	case n > 0:
		return 1
	}
	return 0
}

func TestNormalizeString(t *testing.T) {
	t.Parallel()

	for in, want := range map[string]string{
		"e\u0301":             "é",
		"  Cafe\u0301 \t":     "Café",
		"\u00a0x\u3000":       "x",
		"\u2028x\u0085":       "x",
		"a  b":                "a  b",
		"\u200bx":             "\u200bx", // zero-width space is not white space
		" \u0301x":            "\u0301x",
		"\ufb33":              "\u05d3\u05bc",
		"\u1e9b\u0323":        "\u1e9b\u0323",
		"\u0041\u030a\u0020 ": "\u00c5",
	} {
		require.Equal(t, want, normalizeString(in), "%q", in)
		require.Equal(t, want, normalizeString(want), "%q", in)
	}
}
