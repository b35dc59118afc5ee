package app

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/api"
)

// boot is what a service binary's HTTP endpoints say from its first moment,
// before its services run: /readyz answers 503 with what start-up is
// waiting for ("postgres: waiting: … connection refused (try 3)"), and the
// service's own routes (the operators' API) answer 503 until they are
// mounted. Once the services run, /readyz is theirs (Services.Ready).
type boot struct {
	mu     sync.Mutex
	checks []Check

	services atomic.Pointer[Services]
	routes   atomic.Pointer[http.ServeMux]
}

// The names of the start-up checks; the first three are Services.Ready's.
const (
	checkPostgres = "postgres"
	checkSchema   = "schema"
	checkNATS     = "nats"
	checkStart    = "services"
)

func newBoot() *boot {
	return &boot{checks: []Check{
		{Name: checkPostgres, Detail: "not tried yet"},
		{Name: checkSchema, Detail: "unknown: postgres not reached yet"},
		{Name: checkNATS, Detail: "not tried yet"},
		{Name: checkStart, Detail: "waiting for postgres and nats"},
	}}
}

// set records a start-up check's verdict.
func (b *boot) set(name string, ok bool, detail string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for i := range b.checks {
		if b.checks[i].Name == name {
			b.checks[i] = Check{Name: name, OK: ok, Detail: detail}
		}
	}
}

// started hands /readyz to the running services, and the service's routes
// to mux.
func (b *boot) started(s *Services, mux *http.ServeMux) {
	b.routes.Store(mux)
	b.services.Store(s)
}

// ready is the readiness of the process: the start-up checks until the
// services run, then theirs.
func (b *boot) ready(ctx context.Context) []Check {
	if s := b.services.Load(); s != nil {
		return s.Ready(ctx)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.checks)
}

// ServeHTTP serves the service's routes once they are mounted, and 503
// with what start-up waits for until then.
func (b *boot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if mux := b.routes.Load(); mux != nil {
		mux.ServeHTTP(w, r)
		return
	}
	var waiting []string
	for _, c := range b.ready(r.Context()) {
		if !c.OK {
			waiting = append(waiting, c.Name+": "+c.Detail)
		}
	}
	writeJSON(w, http.StatusServiceUnavailable, api.ErrorBody{Error: api.ErrorDetail{
		Code: "unavailable", Message: "starting: " + strings.Join(waiting, "; ")}})
}

// stopBound is how long a service waits for its work in flight when it is
// told to stop while Postgres or NATS is unreachable: well inside the 10 s
// a container runtime gives before SIGKILL.
const stopBound = 5 * time.Second

// stopServices stops s. When Postgres or NATS is unreachable, nothing in
// flight can be recorded or acknowledged any more, and stopping could wait
// for every statement and drain to time out (tens of seconds), so it waits
// at most stopBound and goes: what was in flight is recovered as after a
// crash (the sweeper, JetStream's redelivery), which the ledger is built
// for. With both reachable, it waits for the work in flight (each consumer
// bounds that with its shutdown grace).
func stopServices(s *Services, log zerolog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	var down []string
	for _, c := range s.Ready(ctx) {
		if !c.OK && c.Name != checkSchema {
			down = append(down, c.Name)
		}
	}
	cancel()
	done := make(chan struct{})
	go func() {
		s.Stop()
		close(done)
	}()
	if len(down) == 0 {
		<-done
		return
	}
	t := time.NewTimer(stopBound)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		log.Warn().Strs("unreachable", down).Dur("waited_ms", stopBound).
			Msg("stopping without waiting any longer for work in flight: it is recovered as after a crash")
	}
}
