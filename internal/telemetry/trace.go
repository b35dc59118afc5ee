// Package telemetry holds opledger's observability plumbing: W3C trace context
// carried on every NATS message and the Prometheus metrics the article asks
// for (operations by tool and class, duplicate suppression, retries, unknown
// outcomes, reconciliation, compensation, time in state).
package telemetry

import (
	"crypto/rand"
	"encoding/hex"
	"strings"
)

// Traceparent is a W3C trace context (version 00).
type Traceparent struct {
	TraceID string // 32 lowercase hex digits
	SpanID  string // 16 lowercase hex digits
	Flags   string // 2 hex digits
}

// ParseTraceparent parses a traceparent header. An absent or malformed header
// starts a new trace, so every operation has a trace id.
func ParseTraceparent(h string) Traceparent {
	parts := strings.Split(strings.TrimSpace(h), "-")
	if len(parts) == 4 && parts[0] == "00" && isHex(parts[1], 32) && isHex(parts[2], 16) && isHex(parts[3], 2) &&
		parts[1] != strings.Repeat("0", 32) && parts[2] != strings.Repeat("0", 16) {
		return Traceparent{TraceID: parts[1], SpanID: parts[2], Flags: parts[3]}
	}
	return Traceparent{TraceID: randHex(16), SpanID: randHex(8), Flags: "01"}
}

// Child returns a new span in the same trace.
func (t Traceparent) Child() Traceparent {
	return Traceparent{TraceID: t.TraceID, SpanID: randHex(8), Flags: t.Flags}
}

// String formats the header value.
func (t Traceparent) String() string {
	if t.TraceID == "" {
		return ""
	}
	return "00-" + t.TraceID + "-" + t.SpanID + "-" + t.Flags
}

// Header returns the message headers that carry t (nil when t is empty).
func (t Traceparent) Header() map[string]string {
	if t.TraceID == "" {
		return nil
	}
	return map[string]string{"traceparent": t.String()}
}

// FromTraceID continues a trace known only by its id (as stored on an
// operation) with a new span.
func FromTraceID(traceID string) Traceparent {
	if !isHex(traceID, 32) {
		return ParseTraceparent("")
	}
	return Traceparent{TraceID: traceID, SpanID: randHex(8), Flags: "01"}
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func randHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)
}
