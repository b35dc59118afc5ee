// Package failpoint lets crash tests kill a service at a named line, the
// way SIGKILL or a power cut would, with nothing flushed and nothing
// cleaned up.
//
// Failpoints are armed by the environment variable OPLEDGER_FAILPOINTS, a
// comma-separated list of name or name@N (fire on the Nth hit; default the
// first), read once at the first hit. Unarmed, a failpoint costs one atomic
// load. The names in use are the constants below; docs/architecture.md lists
// where each sits.
package failpoint

import (
	"os"
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
	once  sync.Once
	armed atomic.Bool
	mu    sync.Mutex
	fire  map[string]int // name → the hit that kills
	hits  map[string]int
)

func load() {
	spec := os.Getenv(EnvVar)
	if spec == "" {
		return
	}
	fire, hits = map[string]int{}, map[string]int{}
	for _, item := range strings.Split(spec, ",") {
		name, n, _ := strings.Cut(strings.TrimSpace(item), "@")
		at, err := strconv.Atoi(n)
		if err != nil || at < 1 {
			at = 1
		}
		fire[name] = at
	}
	armed.Store(true)
}

// Hit kills the process with SIGKILL if the failpoint name is armed and this
// is the hit it waits for.
func Hit(name string) {
	once.Do(load)
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
