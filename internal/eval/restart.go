package eval

import (
	"context"
	"fmt"
	"net"
	"os"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/natsembed"
)

// restartable is an embedded NATS server that the eval restarts on its
// port and its store directory, as an operator's restart (or a crash the
// server recovers from) would.
type restartable struct {
	port int
	dir  string

	mu       sync.Mutex
	srv      *natsembed.Server
	restarts int
}

func startRestartable() (*restartable, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir, err := os.MkdirTemp("", "opledger-eval-nats-")
	if err != nil {
		return nil, err
	}
	n := &restartable{port: port, dir: dir}
	if n.srv, err = natsembed.Start(natsembed.Options{Port: port, StoreDir: dir}); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("eval: start nats: %w", err)
	}
	return n, nil
}

func (n *restartable) url() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// restart stops the server and starts it again on the same port and store,
// trying for up to 10s while the port is not yet free again.
func (n *restartable) restart() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
	}
	var err error
	for until := time.Now().Add(10 * time.Second); ; {
		if n.srv, err = natsembed.Start(natsembed.Options{Port: n.port, StoreDir: n.dir}); err == nil || time.Now().After(until) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("eval: restart nats: %w", err)
	}
	n.restarts++
	return nil
}

// loop restarts the server every every until ctx ends.
func (n *restartable) loop(ctx context.Context, every time.Duration, log zerolog.Logger) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := n.restart(); err != nil {
			log.Error().Err(err).Msg("eval: the NATS server did not come back")
			return
		}
	}
}

func (n *restartable) count() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.restarts
}

func (n *restartable) stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
	}
	os.RemoveAll(n.dir)
}
