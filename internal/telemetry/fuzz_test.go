package telemetry_test

import (
	"regexp"
	"strings"
	"testing"

	"github.com/opledger/opledger/internal/telemetry"
)

var traceparentRE = regexp.MustCompile(`^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$`)

// ParseTraceparent never panics and always yields a valid W3C traceparent:
// the header's own when it is one (version 00, lowercase hex, ids not all
// zero; surrounding white space ignored), a new trace otherwise, so that no
// hostile header reaches a log line, a column or another message.
func FuzzParseTraceparent(f *testing.F) {
	for _, s := range []string{
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		" 00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-00 ",
		"00-0AF7651916CD43DD8448EB211C80319C-b7ad6b7169203331-01",
		"00-00000000000000000000000000000000-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01",
		"01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
		"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01-extra",
		"00-\xff\xfe-x-01", "", "-", "---", "00--b7ad6b7169203331-01",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, h string) {
		tp := telemetry.ParseTraceparent(h)
		if !traceparentRE.MatchString(tp.String()) {
			t.Fatalf("ParseTraceparent(%q) = %q, not a traceparent", h, tp.String())
		}
		if c := tp.Child(); c.TraceID != tp.TraceID || !traceparentRE.MatchString(c.String()) {
			t.Fatalf("child %q of %q", c.String(), tp.String())
		}
		if s := strings.TrimSpace(h); traceparentRE.MatchString(s) && !strings.Contains(s, strings.Repeat("0", 32)) &&
			!strings.Contains(s, "-0000000000000000-") && tp.String() != s {
			t.Fatalf("a valid header %q was replaced by %q", s, tp.String())
		}
	})
}
