package eval

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/failpoint"
)

// Kill mode runs planner-ingest, the dispatchers and the reconciler as
// processes of their own and kills them with SIGKILL, as a machine or the
// OOM killer would.
// In-process, a dispatcher can only be stopped gracefully (bus.Consume's
// stop lets handlers finish and naks what it holds), which is not a crash:
// nothing is left half-done. A process killed mid-call leaves an operation
// in dispatched with its vendor call made, pulled commands unacknowledged,
// a maintenance leader's lock dropped with its session: what the sweeper,
// JetStream redelivery and leader election are there for.
//
// Each process generation also arms one failpoint at a random hit (see
// internal/failpoint), so that some deaths land exactly between the vendor
// call and the commit of its outcome.

// KillStats says what kill mode did.
type KillStats struct {
	// Kills counts SIGKILLs sent by the eval, per service.
	Kills map[string]int `json:"kills"`
	// Crashes counts processes that died by a signal the eval did not
	// send: an armed failpoint fired.
	Crashes map[string]int `json:"failpoint_crashes"`
	// Exits counts processes that exited by themselves (an error).
	Exits    map[string]int `json:"unexpected_exits"`
	Restarts int            `json:"restarts"`
	LogDir   string         `json:"log_dir"`
}

type slot struct {
	name, service string

	mu       sync.Mutex
	cmd      *exec.Cmd
	gen      int
	running  bool // cmd has not been waited for
	killedUs bool
}

type fleet struct {
	argv     []string
	env      []string
	dir      string
	every    time.Duration
	log      zerolog.Logger
	slots    []*slot
	rngMu    sync.Mutex
	rng      *rand.Rand
	mu       sync.Mutex
	stats    KillStats
	stopping chan struct{}
	stopOnce sync.Once
	// calm is set once the kills end: processes started from then on arm
	// no failpoint, so that the run can settle.
	calm atomic.Bool
	wg   sync.WaitGroup
}

// startFleet starts dispatchers dispatcher processes, one reconciler and
// one planner-ingest,
// waits until each is ready, and supervises them: a process that dies is
// started again.
func startFleet(ctx context.Context, cfg Config, registry []byte, databaseURL, natsURL, vendorURL string, seed uint64) (*fleet, error) {
	if len(cfg.ServiceCommand) == 0 {
		return nil, fmt.Errorf("eval: kill mode needs a command that runs one service (Config.ServiceCommand)")
	}
	dir, err := os.MkdirTemp("", "opledger-eval-")
	if err != nil {
		return nil, err
	}
	regPath := filepath.Join(dir, "registry.yaml")
	if err := os.WriteFile(regPath, registry, 0o600); err != nil {
		return nil, err
	}
	// The fleet's processes are this host's: their /readyz answers the
	// loopback without a token (as a container's healthcheck).
	env := []string{"DATABASE_URL=" + databaseURL, "NATS_URL=" + natsURL, "OPLEDGER_LOG=warn", "OPLEDGER_LOG_FORMAT=json",
		"OPLEDGER_HTTP_OPEN_LOOPBACK=true",
		"OPLEDGER_REGISTRY=" + regPath}
	for _, v := range app.VendorNames {
		env = append(env, app.VendorEnv(v)+"="+vendorURL)
	}
	f := &fleet{argv: cfg.ServiceCommand, env: env, dir: dir, every: cfg.KillEvery, log: cfg.Log,
		rng: rand.New(rand.NewPCG(seed, 0x6b696c6c)), stopping: make(chan struct{}),
		stats: KillStats{Kills: map[string]int{}, Crashes: map[string]int{}, Exits: map[string]int{}, LogDir: dir}}
	for i := range cfg.Dispatchers {
		f.slots = append(f.slots, &slot{name: fmt.Sprintf("dispatcher-%d", i+1), service: app.Dispatcher})
	}
	f.slots = append(f.slots, &slot{name: "reconciler-1", service: app.Reconciler},
		&slot{name: "ingest-1", service: app.PlannerIngest})
	for _, s := range f.slots {
		addr, err := f.start(s)
		if err != nil {
			f.stop()
			return nil, err
		}
		f.wg.Add(1)
		go f.supervise(s)
		if err := waitReady(ctx, addr, time.Minute); err != nil {
			f.stop()
			return nil, fmt.Errorf("eval: %s not ready (log: %s): %w", s.name, filepath.Join(dir, s.name+".log"), err)
		}
	}
	return f, nil
}

// start starts the slot's next process generation and returns its HTTP address.
func (f *fleet) start(s *slot) (string, error) {
	addr, err := freeAddr()
	if err != nil {
		return "", err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-f.stopping: // stop signals only what runs when it looks
		return "", errStopping
	default:
	}
	s.gen++
	args := append(slices.Clone(f.argv[1:]), s.service, "-instance", fmt.Sprintf("eval/%s/g%d", s.name, s.gen), "-http", addr)
	if s.service == app.PlannerIngest {
		// Intents a killed planner-ingest held come back after its ack
		// wait: the dispatcher's 10s, not the default 30s.
		args = append(args, "-ack-wait", "10s")
	}
	cmd := exec.Command(f.argv[0], args...)
	cmd.Env = slices.Clone(f.env)
	if !f.calm.Load() {
		cmd.Env = append(cmd.Env, failpoint.EnvVar+"="+f.failpoint(s.service))
	}
	logf, err := os.OpenFile(filepath.Join(f.dir, s.name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return "", err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return "", fmt.Errorf("eval: start %s: %w", s.name, err)
	}
	logf.Close() // the child has its own descriptor
	s.cmd, s.running, s.killedUs = cmd, true, false
	return addr, nil
}

var errStopping = errors.New("eval: stopping")

// failpoint arms one failpoint at a random hit for a new process.
func (f *fleet) failpoint(service string) string {
	f.rngMu.Lock()
	defer f.rngMu.Unlock()
	switch service {
	case app.Reconciler:
		return fmt.Sprintf("%s@%d", failpoint.ReconcileBeforeCommit, 5+f.rng.IntN(60))
	case app.PlannerIngest:
		names := []string{failpoint.IngestMidTx, failpoint.IngestBeforeAck}
		return fmt.Sprintf("%s@%d", names[f.rng.IntN(len(names))], 20+f.rng.IntN(200))
	}
	names := []string{failpoint.DispatchAfterClaim, failpoint.DispatchAfterCall, failpoint.DispatchBeforeAck}
	return fmt.Sprintf("%s@%d", names[f.rng.IntN(len(names))], 5+f.rng.IntN(100))
}

// supervise waits for the slot's process and starts it again until stop.
func (f *fleet) supervise(s *slot) {
	defer f.wg.Done()
	for {
		s.mu.Lock()
		cmd := s.cmd
		s.mu.Unlock()
		err := cmd.Wait()
		s.mu.Lock()
		s.running = false
		killed := s.killedUs
		s.mu.Unlock()
		select {
		case <-f.stopping:
			return
		default:
		}
		f.mu.Lock()
		switch {
		case killed:
			f.stats.Kills[s.service]++
		case cmd.ProcessState != nil && cmd.ProcessState.ExitCode() == -1:
			f.stats.Crashes[s.service]++
		default:
			f.stats.Exits[s.service]++
			f.log.Warn().Err(err).Str("process", s.name).Msg("service process exited by itself")
		}
		f.stats.Restarts++
		f.mu.Unlock()
		select {
		case <-f.stopping:
			return
		case <-time.After(200 * time.Millisecond):
		}
		for {
			if _, err := f.start(s); err == nil {
				break
			}
			select {
			case <-f.stopping:
				return
			case <-time.After(time.Second):
			}
		}
	}
}

// killLoop sends SIGKILL to a random process every f.every until ctx ends.
func (f *fleet) killLoop(ctx context.Context) {
	defer f.calm.Store(true)
	t := time.NewTicker(f.every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.stopping:
			return
		case <-t.C:
		}
		f.rngMu.Lock()
		s := f.slots[f.rng.IntN(len(f.slots))]
		f.rngMu.Unlock()
		s.mu.Lock()
		if s.running {
			s.killedUs = true
			_ = s.cmd.Process.Kill() // it may have died by itself a moment ago
		}
		s.mu.Unlock()
	}
}

// stop ends supervision and stops every process gracefully (SIGKILL after 30s).
func (f *fleet) stop() { f.stopOnce.Do(f.stopNow) }

func (f *fleet) stopNow() {
	close(f.stopping)
	for _, s := range f.slots {
		s.mu.Lock()
		if s.running {
			_ = s.cmd.Process.Signal(os.Interrupt)
		}
		s.mu.Unlock()
	}
	done := make(chan struct{})
	go func() {
		f.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		for _, s := range f.slots {
			s.mu.Lock()
			if s.running {
				_ = s.cmd.Process.Kill()
			}
			s.mu.Unlock()
		}
		<-done
	}
}

func (f *fleet) snapshot() KillStats {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := f.stats
	out.Kills, out.Crashes, out.Exits = maps.Clone(f.stats.Kills), maps.Clone(f.stats.Crashes), maps.Clone(f.stats.Exits)
	return out
}

// freeAddr picks a free loopback port for a child's HTTP server.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// waitReady polls a service's /readyz until it answers 200.
func waitReady(ctx context.Context, addr string, limit time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/readyz", nil)
		if resp, err := hc.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}
