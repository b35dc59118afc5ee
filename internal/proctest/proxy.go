package proctest

import (
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/rs/zerolog"
)

// Links the services reach their dependencies through when Options.Proxies
// is set. Each is a Toxiproxy proxy running in the test process.
const (
	// LinkPostgres carries every service's Postgres connections.
	LinkPostgres = "postgres"
	// LinkVendor carries every service's vendor calls and lookups.
	LinkVendor = "vendor"
)

// LinkNATS is the link that carries one service's NATS connections (every
// instance of it): LinkNATS(Dispatcher) cuts only the dispatchers off.
func LinkNATS(service string) string { return "nats-" + service }

// proxies is the in-process Toxiproxy.
type proxies struct {
	t     testing.TB
	srv   *toxiproxy.ApiServer
	links map[string]*toxiproxy.Proxy
}

func newProxies(t testing.TB) *proxies {
	return &proxies{
		t:     t,
		srv:   toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		links: map[string]*toxiproxy.Proxy{},
	}
}

// add starts a proxy named name from a free loopback port to upstream and
// returns its listen address.
func (p *proxies) add(name, upstream string) string {
	p.t.Helper()
	px := toxiproxy.NewProxy(p.srv, name, "127.0.0.1:0", upstream)
	if err := p.srv.Collection.Add(px, true); err != nil {
		p.t.Fatalf("proctest: proxy %s: %v", name, err)
	}
	p.t.Cleanup(px.Stop)
	p.links[name] = px
	return px.Listen
}

func (p *proxies) link(name string) *toxiproxy.Proxy {
	p.t.Helper()
	px, ok := p.links[name]
	if !ok {
		p.t.Fatalf("proctest: no link %q (is Options.Proxies set?)", name)
	}
	return px
}

// Toxic is one Toxiproxy toxic: Type is latency, bandwidth, slow_close,
// timeout, reset_peer, slicer or limit_data; Stream is "upstream" (towards
// the dependency) or "downstream" (the default); Attributes are the type's,
// e.g. {"latency": 100, "jitter": 20} in milliseconds.
type Toxic struct {
	Name       string         `json:"name"`
	Type       string         `json:"type"`
	Stream     string         `json:"stream,omitempty"`
	Toxicity   float32        `json:"toxicity"`
	Attributes map[string]any `json:"attributes,omitempty"`
}

// forwardUnix listens on a loopback TCP port and forwards each connection to
// the unix socket at path. The private Postgres of the tests listens only on
// a unix socket and Toxiproxy dials TCP, so the Postgres link is
// services → Toxiproxy (TCP) → forwarder (TCP) → Postgres (unix socket);
// Postgres sees socket connections and trusts them as it always does.
func forwardUnix(t testing.TB, path string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proctest: unix forwarder: %v", err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	conns := map[net.Conn]struct{}{}
	track := func(c net.Conn, add bool) {
		mu.Lock()
		defer mu.Unlock()
		if add {
			conns[c] = struct{}{}
		} else {
			delete(conns, c)
		}
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by cleanup
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				up, err := net.Dial("unix", path)
				if err != nil {
					return
				}
				defer up.Close()
				track(c, true)
				track(up, true)
				defer track(c, false)
				defer track(up, false)
				done := make(chan struct{}, 2)
				go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
				go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
				<-done // either side closing ends both
			}()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		for c := range conns {
			_ = c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return ln.Addr().String()
}

// postgresUpstream returns the TCP address that reaches the database of
// connString: its host and port when it is a TCP server, or a forwarder to
// its unix socket (unix is then true).
func postgresUpstream(t testing.TB, connString string) (addr string, unix bool) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		t.Fatalf("proctest: database url: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return forwardUnix(t, filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))), true
	}
	return net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), false
}

// withHostPort returns connString (a URL or keyword/value string) pointing
// at addr over TCP. Through a forwarder to a unix socket TLS is pointless
// (the server has none), so sslmode is then turned off.
func withHostPort(connString, addr string, unix bool) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return "", err
		}
		u.Host = addr
		q := u.Query()
		q.Del("host")
		q.Del("port")
		if unix {
			q.Set("sslmode", "disable")
		}
		u.RawQuery = q.Encode()
		return u.String(), nil
	}
	// In keyword/value strings the last occurrence of a keyword wins.
	s := connString + " host=" + host + " port=" + port
	if unix {
		s += " sslmode=disable"
	}
	return s, nil
}

// withParam returns connString with one more parameter, e.g.
// application_name, which names each process's sessions in pg_stat_activity.
func withParam(connString, key, value string) string {
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		u, err := url.Parse(connString)
		if err != nil {
			return connString
		}
		q := u.Query()
		q.Set(key, value)
		u.RawQuery = q.Encode()
		return u.String()
	}
	return connString + " " + key + "='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(value) + "'"
}
