package proctest

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"

	"github.com/opledger/opledger/internal/natsembed"
)

// NATS is an embedded NATS server that a test can stop and start again on
// the same port, with its store or on an empty store directory (a server that
// lost its disk).
type NATS struct {
	t    testing.TB
	mu   sync.Mutex
	srv  *natsembed.Server
	port int
	dir  string // the current store directory
	n    int    // store directories made so far
	base string
}

func startNATS(t testing.TB) *NATS {
	t.Helper()
	n := &NATS{t: t, base: t.TempDir()}
	n.dir = n.newDir()
	n.start()
	t.Cleanup(n.Stop)
	return n
}

func (n *NATS) newDir() string {
	n.n++
	d := filepath.Join(n.base, "store-"+strconv.Itoa(n.n))
	if err := os.MkdirAll(d, 0o700); err != nil {
		n.t.Fatalf("proctest: nats store dir: %v", err)
	}
	return d
}

func (n *NATS) start() {
	srv, err := natsembed.Start(natsembed.Options{Port: n.port, StoreDir: n.dir})
	if err != nil {
		n.t.Fatalf("proctest: start nats on port %d: %v", n.port, err)
	}
	if n.port == 0 {
		u, err := url.Parse(srv.URL())
		if err != nil {
			n.t.Fatalf("proctest: nats url %q: %v", srv.URL(), err)
		}
		if n.port, err = strconv.Atoi(u.Port()); err != nil {
			n.t.Fatalf("proctest: nats url %q: %v", srv.URL(), err)
		}
	}
	n.srv = srv
}

// URL is the server's client URL; it stays the same across restarts.
func (n *NATS) URL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.port) }

// Addr is host:port.
func (n *NATS) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

// Stop shuts the server down (clients see their connections drop). Stopping
// a stopped server does nothing.
func (n *NATS) Stop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
}

// Start starts a stopped server again on the same port: on its old store,
// or, with emptyStore, on a new empty directory, as a server whose disk was
// lost (no streams, no consumers, no messages, no duplicate window).
func (n *NATS) Start(emptyStore bool) {
	n.t.Helper()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.srv != nil {
		n.t.Fatalf("proctest: nats is running")
	}
	if emptyStore {
		n.dir = n.newDir()
	}
	n.start()
}

// Restart is Stop then Start.
func (n *NATS) Restart(emptyStore bool) {
	n.t.Helper()
	n.Stop()
	n.Start(emptyStore)
}
