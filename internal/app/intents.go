package app

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// IntentNATS says how the HTTP intent API reaches NATS: for each tenant
// whose agent tokens submit intents, one connection as that tenant's
// agent, so that NATS itself holds the API to the tenant's subjects
// (opledger.intents.<tenant>.> out, its results in; docs/security.md).
type IntentNATS struct {
	URL string
	// Base holds the TLS settings every connection uses, and the
	// credential and inbox prefix used when SecretsDir is empty.
	Base bus.Auth
	// SecretsDir, when set, holds the agents' passwords as
	// deploy/nats/genpasswd writes them: the connection for tenant t is
	// user agent-<t> with the password in <dir>/agent-<t>.password (the
	// default tenant's user is agent-default). Empty: every tenant's
	// connection uses Base's credential, which suits a NATS server without
	// per-user permissions (opledger dev, the tests), not the shipped
	// nats.conf, where the services may not publish intents.
	SecretsDir string
}

// auth is the credential of tenant's connection.
func (n IntentNATS) auth(tenant string) bus.Auth {
	a := n.Base
	if n.SecretsDir == "" {
		return a // the base identity, with its inbox
	}
	// The tenant's agent: replies come to the tenant's inbox
	// (client.InboxPrefix), the one an agent may read.
	a.InboxPrefix = ""
	user := "agent-" + tenant
	a.User, a.Password, a.PasswordFile = user, "", filepath.Join(n.SecretsDir, user+".password")
	a.Token, a.TokenFile, a.NkeySeedFile, a.CredsFile = "", "", "", ""
	return a
}

// tenantDoors are the intent API's doors, one NATS connection per tenant,
// made on first use and kept; a connection that could not be made is tried
// again at the next request.
type tenantDoors struct {
	nats IntentNATS
	reg  *registry.Registry
	wait time.Duration
	log  zerolog.Logger

	mu      sync.Mutex
	closed  bool
	doors   map[string]*agentcall.Door
	clients []*client.Client
}

func newTenantDoors(n IntentNATS, reg *registry.Registry, wait time.Duration, log zerolog.Logger) *tenantDoors {
	return &tenantDoors{nats: n, reg: reg, wait: wait, log: log, doors: map[string]*agentcall.Door{}}
}

// Door returns tenant's door, connecting first if need be.
func (t *tenantDoors) Door(ctx context.Context, tenant string) (*agentcall.Door, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, client.ErrClosed
	}
	if d, ok := t.doors[tenant]; ok {
		return d, nil
	}
	if !wire.ValidTenant(tenant) {
		return nil, fmt.Errorf("intent api: tenant %q is not a tenant name", wire.Clip(tenant))
	}
	auth := t.nats.auth(tenant)
	opts, err := auth.Options()
	if err != nil {
		return nil, fmt.Errorf("intent api: nats credentials of tenant %s: %w", tenant, err)
	}
	opts = append(opts, nats.MaxReconnects(-1), nats.Timeout(5*time.Second))
	cl, err := client.Connect(t.nats.URL, "opledger-intent-api/"+tenant, client.Tenant(tenant), client.NATSOptions(opts...))
	if err != nil {
		return nil, fmt.Errorf("intent api: nats for tenant %s at %s: %w", tenant, bus.RedactURL(t.nats.URL), err)
	}
	// Where each tenant has an account of its own, its results are read
	// from its own RESULTS stream; elsewhere this finds the services' one.
	ectx, cancel := context.WithTimeout(ctx, 10*time.Second)
	err = cl.EnsureResultsStream(ectx, 0)
	cancel()
	if err != nil {
		cl.Close()
		return nil, fmt.Errorf("intent api: results stream of tenant %s: %w", tenant, err)
	}
	d, err := agentcall.New(agentcall.Config{Client: cl, Tenant: tenant, Registry: t.reg, EventPrefix: "http", Wait: t.wait,
		Actor: wire.Actor{Type: "agent", ID: "opledger-intent-api"}})
	if err != nil {
		cl.Close()
		return nil, err
	}
	t.doors[tenant], t.clients = d, append(t.clients, cl)
	t.log.Info().Str("tenant", tenant).Str("nats_user", auth.User).Str("nats_credential", auth.Kind()).Msg("intent api: connected to NATS as the tenant's agent")
	return d, nil
}

// Close closes every connection; Door fails afterwards.
func (t *tenantDoors) Close() {
	t.mu.Lock()
	t.closed = true
	cls := t.clients
	t.clients, t.doors = nil, map[string]*agentcall.Door{}
	t.mu.Unlock()
	for _, cl := range cls {
		cl.Close()
	}
}

// intentWait is the intent API's wait bound: d, or agentcall.DefaultWait.
func intentWait(d time.Duration) time.Duration {
	if d <= 0 {
		return agentcall.DefaultWait
	}
	return min(d, agentcall.MaxWait)
}
