package proctest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one service instance run as a process: started, killed and
// restarted by the test, its output kept across restarts and printed only if
// the test fails.
type Proc struct {
	sys      *System
	Service  string // one of Services
	Instance string // OPLEDGER_INSTANCE: names it in logs and attempt rows
	env      []string

	mu      sync.Mutex
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current run ended
	state   *os.ProcessState
	runs    int
	httpURL string        // of the current run, from its "started" log line
	started chan struct{} // closed when the current run logged "started"
	log     *logBuffer
}

// Start starts a new run of the process with the system's environment plus
// env (NAME=value, e.g. a failpoint). It fails the test if the process is
// running. It does not wait for it to be ready: see WaitReady.
func (p *Proc) Start(env ...string) {
	t := p.sys.t
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil && !closed(p.exited) {
		t.Fatalf("proctest: %s is already running", p.Instance)
	}
	p.runs++
	cmd := exec.Command(filepath.Join(p.sys.bin, p.Service))
	cmd.Env = append(append(p.sys.baseEnv(p.Service, p.Instance), p.env...), env...)
	started := make(chan struct{})
	w := &lineWriter{buf: p.log, onLine: func(line []byte) {
		if url, ok := startedLine(line); ok {
			p.mu.Lock()
			if p.started == started && !closed(started) {
				p.httpURL = url
				close(started)
			}
			p.mu.Unlock()
		}
	}}
	cmd.Stdout, cmd.Stderr = w, w
	p.log.mark(fmt.Sprintf("run %d of %s (%s) with %s", p.runs, p.Instance, p.Service, strings.Join(env, " ")))
	if err := cmd.Start(); err != nil {
		t.Fatalf("proctest: start %s: %v", p.Instance, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.started, p.state, p.httpURL = cmd, exited, started, nil, ""
	go func() {
		_ = cmd.Wait() // the state says how it ended
		p.mu.Lock()
		p.state = cmd.ProcessState
		p.mu.Unlock()
		w.flush()
		p.log.mark(fmt.Sprintf("%s exited: %s", p.Instance, cmd.ProcessState))
		close(exited)
	}()
}

// Running reports whether the current run has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.cmd != nil && !closed(p.exited)
}

// Pid is the current run's process id.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill sends SIGKILL, as a crash or the OOM killer would, and waits until the
// process is gone. Killing a process that has exited does nothing.
func (p *Proc) Kill() { p.signal(syscall.SIGKILL) }

// Stop sends SIGTERM and waits for a clean exit, failing the test if the
// exit is not clean.
func (p *Proc) Stop() {
	p.sys.t.Helper()
	p.signal(syscall.SIGTERM)
	if st := p.State(); st != nil && !st.Success() {
		p.sys.t.Errorf("proctest: %s did not stop cleanly on SIGTERM: %s", p.Instance, st)
	}
}

func (p *Proc) signal(sig syscall.Signal) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil || closed(exited) {
		return
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		p.sys.t.Errorf("proctest: %s still running a minute after %s", p.Instance, sig)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Restart kills the process if it runs, then starts it again with env and
// waits until it is ready.
func (p *Proc) Restart(env ...string) {
	p.sys.t.Helper()
	p.Kill()
	p.Start(env...)
	p.WaitReady(p.sys.opts.ReadyTimeout)
}

// State is how the last run ended, nil while it runs.
func (p *Proc) State() *os.ProcessState {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// WaitExit waits up to d for the current run to exit and returns how it
// ended; it fails the test if it is still running then.
func (p *Proc) WaitExit(d time.Duration) *os.ProcessState {
	t := p.sys.t
	t.Helper()
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return p.State()
	case <-time.After(d):
		t.Fatalf("proctest: %s still running after %s", p.Instance, d)
		return nil
	}
}

// KilledBySIGKILL reports whether the last run ended by SIGKILL (a fired
// failpoint kills its own process that way).
func (p *Proc) KilledBySIGKILL() bool {
	st := p.State()
	if st == nil {
		return false
	}
	ws, ok := st.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == syscall.SIGKILL
}

// WaitReady waits up to d until the current run has started and its
// /readyz answers 200 (Postgres reachable, schema current, its NATS
// connections up and its consumers on the server).
func (p *Proc) WaitReady(d time.Duration) {
	t := p.sys.t
	t.Helper()
	deadline := time.Now().Add(d)
	p.mu.Lock()
	started, exited := p.started, p.exited
	p.mu.Unlock()
	select {
	case <-started:
	case <-exited:
		t.Fatalf("proctest: %s exited before it started: %s", p.Instance, p.State())
	case <-time.After(time.Until(deadline)):
		t.Fatalf("proctest: %s did not start within %s", p.Instance, d)
	}
	p.mu.Lock()
	url := p.httpURL
	p.mu.Unlock()
	client := &http.Client{Timeout: 5 * time.Second}
	last := ""
	for time.Now().Before(deadline) {
		req, err := http.NewRequest(http.MethodGet, url+"/readyz", nil)
		if err != nil {
			t.Fatalf("proctest: %v", err)
		}
		req.Header.Set("Authorization", "Bearer "+p.sys.probeToken)
		resp, err := client.Do(req)
		if err == nil {
			var body bytes.Buffer
			_, _ = body.ReadFrom(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
			last = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(body.String()))
		} else {
			last = err.Error()
		}
		select {
		case <-exited:
			t.Fatalf("proctest: %s exited before it was ready: %s", p.Instance, p.State())
		case <-time.After(100 * time.Millisecond):
		}
	}
	t.Fatalf("proctest: %s not ready within %s: %s", p.Instance, d, last)
}

// Logs returns everything the process wrote, every run.
func (p *Proc) Logs() string { return p.log.String() }

// startedLine recognises the service's JSON log line {"message":"started","http":URL}.
func startedLine(line []byte) (string, bool) {
	if !bytes.Contains(line, []byte(`"started"`)) {
		return "", false
	}
	var l struct {
		Message string `json:"message"`
		HTTP    string `json:"http"`
	}
	if json.Unmarshal(line, &l) != nil || l.Message != "started" || l.HTTP == "" {
		return "", false
	}
	return l.HTTP, true
}

func closed(c chan struct{}) bool {
	if c == nil {
		return false
	}
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// maxLog bounds what is kept of one process's output; past it, the middle
// is dropped (the start and the latest lines are what an incident needs).
const maxLog = 8 << 20

// logBuffer keeps a process's output across its runs.
type logBuffer struct {
	mu      sync.Mutex
	head    bytes.Buffer
	tail    []string
	tailLen int
	dropped int
}

func (b *logBuffer) writeLine(line string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.head.Len()+len(line) < maxLog/2 && b.dropped == 0 && len(b.tail) == 0 {
		b.head.WriteString(line)
		return
	}
	b.tail = append(b.tail, line)
	b.tailLen += len(line)
	for b.tailLen > maxLog/2 && len(b.tail) > 1 {
		b.tailLen -= len(b.tail[0])
		b.tail = b.tail[1:]
		b.dropped++
	}
}

func (b *logBuffer) mark(s string) {
	b.writeLine(fmt.Sprintf("----- proctest %s: %s -----\n", time.Now().Format("15:04:05.000"), s))
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var s strings.Builder
	s.WriteString(b.head.String())
	if b.dropped > 0 {
		fmt.Fprintf(&s, "----- proctest: %d lines dropped -----\n", b.dropped)
	}
	for _, l := range b.tail {
		s.WriteString(l)
	}
	return s.String()
}

// lineWriter splits a process's output into lines for the buffer and a
// watcher.
type lineWriter struct {
	mu      sync.Mutex
	buf     *logBuffer
	partial []byte
	onLine  func([]byte)
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.partial = append(w.partial, p...)
	for {
		i := bytes.IndexByte(w.partial, '\n')
		if i < 0 {
			break
		}
		line := w.partial[:i+1]
		w.buf.writeLine(string(line))
		if w.onLine != nil {
			w.onLine(line)
		}
		w.partial = w.partial[i+1:]
	}
	return len(p), nil
}

func (w *lineWriter) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.partial) > 0 {
		w.buf.writeLine(string(w.partial) + "\n")
		w.partial = nil
	}
}

// Runs is how many times the process was started.
func (p *Proc) Runs() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.runs
}
