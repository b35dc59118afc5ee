package proctest

import (
	"fmt"
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
// is set. Each is a Toxiproxy proxy running in the test process, one per
// instance and dependency (the vendors' is shared); a group name stands for
// several links.
const (
	// LinkPostgres is every service's Postgres link (LinkPostgresOf each).
	LinkPostgres = "postgres"
	// LinkVendor carries every service's vendor calls and lookups.
	LinkVendor = "vendor"
)

// LinkNATS is the NATS link of a service (every instance of it:
// LinkNATS(Dispatcher) cuts all dispatchers off) or of one instance
// (LinkNATS(DispatcherN(1))).
func LinkNATS(serviceOrInstance string) string { return "nats-" + serviceOrInstance }

// LinkPostgresOf is the Postgres link of a service (every instance of it)
// or of one instance.
func LinkPostgresOf(serviceOrInstance string) string { return "postgres-" + serviceOrInstance }

// proxies is the in-process Toxiproxy.
type proxies struct {
	t      testing.TB
	srv    *toxiproxy.ApiServer
	links  map[string]*toxiproxy.Proxy
	groups map[string][]string
	// held releases the ports of the links that are cut (System.CutLink).
	heldMu sync.Mutex
	held   map[string]func()
}

// hold keeps the port of a stopped link until release.
func (p *proxies) hold(px *toxiproxy.Proxy) error {
	release, err := holdPort(px.Listen)
	if err != nil {
		return err
	}
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	if old := p.held[px.Name]; old != nil {
		old()
	}
	p.held[px.Name] = release
	return nil
}

// release lets go of a held port, if px's is held.
func (p *proxies) release(px *toxiproxy.Proxy) {
	p.heldMu.Lock()
	defer p.heldMu.Unlock()
	if r := p.held[px.Name]; r != nil {
		r()
		delete(p.held, px.Name)
	}
}

func newProxies(t testing.TB) *proxies {
	p := &proxies{
		t:      t,
		srv:    toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop()),
		links:  map[string]*toxiproxy.Proxy{},
		groups: map[string][]string{},
		held:   map[string]func(){},
	}
	t.Cleanup(func() {
		p.heldMu.Lock()
		defer p.heldMu.Unlock()
		for _, release := range p.held {
			release()
		}
	})
	return p
}

// add starts a proxy named name from a free loopback port to upstream and
// returns its listen address; it also answers to the group names.
func (p *proxies) add(name, upstream string, groups ...string) string {
	p.t.Helper()
	px := toxiproxy.NewProxy(p.srv, name, "127.0.0.1:0", upstream)
	if err := p.srv.Collection.Add(px, true); err != nil {
		p.t.Fatalf("proctest: proxy %s: %v", name, err)
	}
	p.t.Cleanup(px.Stop)
	p.links[name] = px
	for _, g := range groups {
		p.groups[g] = append(p.groups[g], name)
	}
	return px.Listen
}

// link returns the proxies a link or group name stands for.
func (p *proxies) link(name string) []*toxiproxy.Proxy {
	p.t.Helper()
	if p == nil {
		p.t.Fatalf("proctest: no link %q: Options.Proxies is not set", name)
	}
	if px, ok := p.links[name]; ok {
		return []*toxiproxy.Proxy{px}
	}
	var out []*toxiproxy.Proxy
	for _, n := range p.groups[name] {
		out = append(out, p.links[n])
	}
	if len(out) == 0 {
		p.t.Fatalf("proctest: no link %q", name)
	}
	return out
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

// forwarder listens on a loopback TCP port and forwards each connection
// to Postgres, over a unix socket or TCP. The private Postgres of the tests
// listens only on a unix socket and Toxiproxy dials TCP, so each Postgres
// link is service → Toxiproxy (TCP) → forwarder → Postgres; Postgres sees
// socket connections and trusts them as it always does.
//
// A forwarder can also partition its link (Freeze), which Toxiproxy
// cannot: nothing gets through either way and nothing is closed, not even
// when one side closes its end, as when a host loses power or the network
// splits. Postgres then keeps the sessions of the other side, and whatever
// they hold, until something on the server ends them.
type forwarder struct {
	t       testing.TB
	network string // "unix" or "tcp"
	addr    string // the upstream
	ln      net.Listener

	mu     sync.Mutex
	frozen bool
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
}

func newForwarder(t testing.TB, network, addr string) *forwarder {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("proctest: forwarder: %v", err)
	}
	f := &forwarder{t: t, network: network, addr: addr, ln: ln, conns: map[net.Conn]struct{}{}}
	f.wg.Add(1)
	go f.accept()
	t.Cleanup(f.close)
	return f
}

// Addr is where the forwarder listens.
func (f *forwarder) Addr() string { return f.ln.Addr().String() }

func (f *forwarder) track(c net.Conn) {
	f.mu.Lock()
	f.conns[c] = struct{}{}
	f.mu.Unlock()
}

func (f *forwarder) isFrozen() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

func (f *forwarder) accept() {
	defer f.wg.Done()
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return // closed
		}
		f.track(c)
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			if f.isFrozen() {
				// No route to Postgres: the connection hangs.
				f.pipe(c, nil)
				return
			}
			up, err := net.Dial(f.network, f.addr)
			if err != nil {
				_ = c.Close()
				return
			}
			f.track(up)
			done := make(chan struct{}, 2)
			go func() { f.pipe(c, up); done <- struct{}{} }()
			go func() { f.pipe(up, c); done <- struct{}{} }()
			<-done
		}()
	}
}

// pipe copies src to dst (nil: nowhere) until src ends; then it closes
// both, unless the link is frozen: a partition carries no close either.
func (f *forwarder) pipe(src, dst net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 && dst != nil && !f.isFrozen() {
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			break
		}
	}
	if f.isFrozen() {
		return // Heal closes what is left
	}
	_ = src.Close()
	if dst != nil {
		_ = dst.Close()
	}
}

// Freeze partitions the link: from now on no byte and no close goes
// through, and new connections hang.
func (f *forwarder) Freeze() {
	f.mu.Lock()
	f.frozen = true
	f.mu.Unlock()
}

// Heal ends the partition. The connections that lived through it have lost
// data and are broken on both sides: they are closed, as both ends would
// find out once they send again. New connections work.
func (f *forwarder) Heal() {
	f.mu.Lock()
	f.frozen = false
	conns := f.conns
	f.conns = map[net.Conn]struct{}{}
	f.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
}

func (f *forwarder) close() {
	_ = f.ln.Close()
	f.Heal()
	f.wg.Wait()
}

// postgresUpstream returns how to reach the database of connString:
// ("unix", its socket's path) or ("tcp", host:port).
func postgresUpstream(t testing.TB, connString string) (network, addr string) {
	t.Helper()
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		t.Fatalf("proctest: database url: %v", err)
	}
	if strings.HasPrefix(cfg.Host, "/") {
		return "unix", filepath.Join(cfg.Host, fmt.Sprintf(".s.PGSQL.%d", cfg.Port))
	}
	return "tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
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
