package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/pkg/wire"
)

// runNATS is the hidden "opledger nats -store DIR": the embedded NATS
// server with JetStream, alone in its process. It prints its client URL on
// a line of its own once it accepts clients, and stops on SIGINT or
// SIGTERM, or when its standard input closes (the process that started it
// is gone, however it went). It exists so that "opledger bench -duration"
// watches opledger's memory apart from the NATS server's, as they are
// apart in production.
func runNATS(ctx context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("nats", flag.ContinueOnError)
	fs.SetOutput(stderr)
	store := fs.String("store", "", "JetStream's store directory (kept); empty: a temporary one, removed on exit")
	if err := parse(fs, args); err != nil {
		return err
	}
	srv, err := natsembed.Start(natsembed.Options{StoreDir: *store})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	if _, err := fmt.Fprintln(stdout, srv.URL()); err != nil {
		return err
	}
	parentGone := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(parentGone)
	}()
	select {
	case <-ctx.Done():
	case <-parentGone:
	}
	return nil
}

// natsProcess is a NATS server in a child process ("opledger nats").
type natsProcess struct {
	URL   string
	Pid   int
	cmd   *exec.Cmd
	stdin io.WriteCloser
	// done is closed once the child has exited and been reaped.
	done chan struct{}
}

// natsStartTimeout bounds the wait for the child's URL.
const natsStartTimeout = 30 * time.Second

// startNATSProcess runs this binary's hidden nats command with its store in
// dir and waits for its URL. The child also stops when this process dies,
// since its standard input then closes.
func startNATSProcess(ctx context.Context, dir string, stderr io.Writer) (*natsProcess, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("nats process: %w", err)
	}
	cmd := exec.Command(exe, "nats", "-store", dir)
	// A test binary re-executed runs as opledger only when told (TestMain).
	// The server runs with Go's default collector, as a nats-server binary
	// does, not with the GOGC opledger's own processes take (app.TuneGC):
	// its resident set is what an operator would see.
	cmd.Env = append(os.Environ(), asMainEnv+"=1", "GOGC=100")
	cmd.Stderr = stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("nats process: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("nats process: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("nats process: %w", err)
	}
	p := &natsProcess{Pid: cmd.Process.Pid, cmd: cmd, stdin: stdin, done: make(chan struct{})}
	first := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		line := ""
		if sc.Scan() {
			line = strings.TrimSpace(sc.Text())
		}
		first <- line
		_, _ = io.Copy(io.Discard, out) // nothing more is printed; never block the child
	}()
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	timer := time.NewTimer(natsStartTimeout)
	defer timer.Stop()
	select {
	case line := <-first:
		if !strings.HasPrefix(line, "nats://") {
			p.Close()
			return nil, fmt.Errorf("nats process: did not start (printed %q)", wire.Clip200(line))
		}
		p.URL = line
		return p, nil
	case <-timer.C:
		p.Close()
		return nil, fmt.Errorf("nats process: no URL within %s", natsStartTimeout)
	case <-ctx.Done():
		p.Close()
		return nil, ctx.Err()
	}
}

// Close stops the child: its standard input closes and it gets SIGTERM;
// one still running 10 s later is killed. It returns once the child has
// exited. It may be called again.
func (p *natsProcess) Close() {
	_ = p.stdin.Close()
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// rss is the child's resident set size.
func (p *natsProcess) rss() (int64, error) {
	return statmRSS(fmt.Sprintf("/proc/%d/statm", p.Pid))
}
