package app

import "runtime/debug"

// DefaultGCPercent is the garbage collector's target the binaries run with
// when GOGC is not set: a collection when the heap has grown by four times
// what was live after the last one, instead of Go's one time. opledger's
// processes keep little alive (tens of MB: connections, in-flight
// messages) and allocate quickly for every message they handle, so at
// Go's default the collector took about a fifth of a busy process's CPU;
// at 400 the bench process spends about 20% less CPU per operation
// (docs/architecture.md, "Where the time goes") for a heap that peaks at a
// few times the live one. GOGC, and GOMEMLIMIT, still decide when set.
const DefaultGCPercent = 400

// TuneGC sets the collector's target to DefaultGCPercent unless the
// environment sets GOGC. The binaries' mains call it first.
func TuneGC(env func(string) (string, bool)) {
	if _, set := env("GOGC"); !set {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
