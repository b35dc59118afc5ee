// Package failpoint lets crash tests kill a service at a named line, the
// way SIGKILL or a power cut would, with nothing flushed and nothing
// cleaned up.
//
// Failpoints are armed by Arm, which a service's main calls with the value
// of the environment variable OPLEDGER_FAILPOINTS (EnvVar), read at the
// program's edge (app.ParseServiceFlags): a comma-separated list of name or
// name@N (fire on the Nth hit; default the first). Unarmed, a failpoint
// costs one atomic load. The names in use are the constants below;
// docs/architecture.md lists where each sits.
//
// The armed set is package state, against the rule of no package-level
// state, on purpose: a failpoint kills the whole process, and Hit sits deep
// in the dispatcher, the ingester, the relay and the reconciler, where
// passing an armed set through every config would put test plumbing into
// production code for no gain.
package failpoint

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
)

// The failpoints compiled into the services.
const (
	// IngestMidTx: planner-ingest inside the intent's transaction, after
	// the decision is written and before it commits.
	IngestMidTx = "ingest.mid_tx"
	// IngestBeforeAck: planner-ingest after the commit, before the intent
	// is acknowledged to JetStream.
	IngestBeforeAck = "ingest.before_ack"
	// DispatchAfterClaim: the dispatcher after the claim committed, before
	// the vendor call.
	DispatchAfterClaim = "dispatch.after_claim"
	// DispatchAfterCall: the dispatcher after the vendor answered, before
	// the outcome commits.
	DispatchAfterCall = "dispatch.after_call"
	// DispatchBeforeAck: the dispatcher after the outcome committed, before
	// the command is acknowledged.
	DispatchBeforeAck = "dispatch.before_ack"
	// RelayBeforeMark: an outbox relay after JetStream acknowledged a batch,
	// before the published rows are deleted.
	RelayBeforeMark = "relay.before_mark"
	// ReconcileBeforeCommit: the reconciler after the vendor lookup, before
	// the verdict commits.
	ReconcileBeforeCommit = "reconcile.before_commit"
)

// Names lists every failpoint.
var Names = []string{IngestMidTx, IngestBeforeAck, DispatchAfterClaim, DispatchAfterCall, DispatchBeforeAck, RelayBeforeMark, ReconcileBeforeCommit}

// EnvVar arms failpoints.
const EnvVar = "OPLEDGER_FAILPOINTS"

var (
	armed atomic.Bool
	mu    sync.Mutex
	fire  map[string]int // name → the hit that kills
	hits  map[string]int
)

// Arm arms the failpoints spec names (the format of EnvVar), replacing any
// armed before; an empty spec disarms them all. Call it once at start, before
// the service runs. A name that is not in Names, or a hit count that is not
// a positive integer, is an error and arms nothing: a crash test with a
// misspelt failpoint would otherwise pass without crashing anything.
func Arm(spec string) error {
	next := map[string]int{}
	for _, item := range strings.Split(spec, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, n, hasN := strings.Cut(item, "@")
		if !slices.Contains(Names, name) {
			return fmt.Errorf("%s: unknown failpoint %q (have %s)", EnvVar, name, strings.Join(Names, ", "))
		}
		at := 1
		if hasN {
			var err error
			if at, err = strconv.Atoi(n); err != nil || at < 1 {
				return fmt.Errorf("%s: %q: the hit count must be a positive integer", EnvVar, item)
			}
		}
		next[name] = at
	}
	mu.Lock()
	defer mu.Unlock()
	fire, hits = next, map[string]int{}
	armed.Store(len(fire) > 0)
	return nil
}

// Hit kills the process with SIGKILL if the failpoint name is armed and this
// is the hit it waits for.
func Hit(name string) {
	if !armed.Load() {
		return
	}
	mu.Lock()
	at, ok := fire[name]
	hits[name]++
	kill := ok && hits[name] == at
	mu.Unlock()
	if kill {
		if p, err := os.FindProcess(os.Getpid()); err == nil {
			_ = p.Kill() // SIGKILL on unix: nothing flushed, nothing deferred
		}
		select {} // never go on past a fired failpoint
	}
}
