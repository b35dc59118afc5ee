package app

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/telemetry"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/internal/webhook"
	"github.com/opledger/opledger/pkg/registry"
)

// VendorNames are the vendors of the example registry, all served by the
// local stand-in vendors in a stack.
var VendorNames = []string{"payments", "email", "tickets", "crm", "accounts"}

// StackConfig configures a whole opledger in one process.
type StackConfig struct {
	Infra InfraConfig
	// Registry says where the tool registry comes from; its vendors default
	// to the stack's local stand-in vendors.
	Registry RegistryConfig
	// HTTPAddr serves /metrics, /healthz, /readyz, the operators' API
	// (internal/api), the webhook intake (POST /webhooks/{provider}) and
	// /v1/vendors/stats ("" = no HTTP server).
	HTTPAddr string
	// APITokens authenticate the operators' API, /v1/vendors/stats,
	// /metrics and /readyz; nil answers them 503 "no API tokens
	// configured" (only /healthz needs no token).
	APITokens *api.Tokens
	// IntentWait bounds the HTTP intent API's ?wait=final (0: 25s). The
	// intent API is served with the operators' one; it reaches NATS as
	// each tenant's agent, on the stack's NATS with the services'
	// credentials (Services.NATSAuth).
	IntentWait time.Duration
	// Services configures the services; DatabaseURL, NATSURL, Registry and
	// Metrics are filled in.
	Services ServicesConfig
	// VendorLatency delays every local vendor request.
	VendorLatency time.Duration
	// VendorWebhooks has the local stand-in vendors send signed webhooks
	// after their effects to the stack's HTTP server (needs HTTPAddr), with
	// a fresh secret per provider that the intake also accepts.
	VendorWebhooks bool
	Log            zerolog.Logger
}

// Stack is a running opledger: infrastructure, local vendors and all
// services in one process, for dev mode, the demo, the bench and tests.
type Stack struct {
	Infra    *Infra
	Vendors  *vendors.Server
	Registry *registry.Registry
	Services *Services
	Metrics  *telemetry.Metrics
	HTTP     *HTTPServer

	doors *tenantDoors // the intent API's NATS connections
}

// StartStack starts everything.
func StartStack(ctx context.Context, cfg StackConfig) (_ *Stack, err error) {
	d := &Stack{}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if d.Infra, err = StartInfra(ctx, cfg.Infra); err != nil {
		return nil, err
	}
	if d.Vendors, err = vendors.Start(vendors.Options{Latency: cfg.VendorLatency}); err != nil {
		return nil, fmt.Errorf("start local vendors: %w", err)
	}
	rc := cfg.Registry
	rc.Vendors = map[string]string{}
	for _, v := range VendorNames {
		rc.Vendors[v] = d.Vendors.URL()
	}
	for v, u := range cfg.Registry.Vendors {
		rc.Vendors[v] = u
	}
	if d.Registry, err = LoadRegistry(rc); err != nil {
		return nil, err
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.Metrics = telemetry.NewMetrics(promReg)

	sc := cfg.Services
	sc.Instance = cmp.Or(sc.Instance, DefaultInstance())
	sc.DatabaseURL, sc.NATSURL, sc.Registry, sc.Metrics, sc.Log = d.Infra.DatabaseURL, d.Infra.NATSURL, d.Registry, d.Metrics, cfg.Log
	if sc.DatabaseURLs == nil {
		sc.DatabaseURLs = d.Infra.DatabaseURLs
	}
	// Webhook secrets: the environment's, and with VendorWebhooks one more
	// per provider that only this process and its stand-ins know.
	var vendorSecrets map[string]string
	if sc.WebhookSecrets == nil {
		if sc.WebhookSecrets, err = WebhookSecrets(d.Registry, cfg.Registry.LookupEnv, nil); err != nil {
			return nil, err
		}
		if cfg.VendorWebhooks {
			var dev map[string][]webhook.Secret
			if vendorSecrets, dev, err = devWebhookSecrets(d.Registry); err != nil {
				return nil, err
			}
			for p, s := range dev {
				sc.WebhookSecrets[p] = append(s, sc.WebhookSecrets[p]...)
			}
		}
	}
	if sc.MCPUpstreams == nil {
		if sc.MCPUpstreams, err = MCPUpstreamsFromEnv(d.Registry, rc.LookupEnv); err != nil {
			return nil, err
		}
	}
	if d.Services, err = StartServices(ctx, sc); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "" {
		a, err := api.New(api.Config{Ops: ops.New(d.Services.StoreFor(PartAPI), d.Registry), Tokens: cfg.APITokens, Registerer: promReg,
			Log: cfg.Log.With().Str("service", "api").Str("instance", sc.Instance).Logger()})
		if err != nil {
			return nil, err
		}
		d.doors = newTenantDoors(IntentNATS{URL: d.Infra.NATSURL, Base: sc.NATSAuth}, d.Registry, intentWait(cfg.IntentWait),
			cfg.Log.With().Str("service", "api").Str("instance", sc.Instance).Logger())
		intents, err := api.NewIntents(api.IntentsConfig{API: a, Doors: d.doors, Wait: intentWait(cfg.IntentWait), Registerer: promReg,
			Log: cfg.Log.With().Str("service", "api").Str("instance", sc.Instance).Logger()})
		if err != nil {
			return nil, err
		}
		const stats = "GET /v1/vendors/stats"
		d.HTTP, err = ServeHTTP(HTTPConfig{Addr: cfg.HTTPAddr, Gatherer: promReg, Ready: d.Services.Ready, Guard: a.Guard(),
			Log: cfg.Log.With().Str("service", "http").Str("instance", sc.Instance).Logger(),
			Routes: func(mux *http.ServeMux) {
				a.Mount(mux)
				intents.Mount(mux)
				d.Services.Webhooks.Mount(mux)
				mux.Handle(stats, a.Authenticated(stats, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					writeJSON(w, http.StatusOK, d.Vendors.Stats())
				})))
			}})
		if err != nil {
			return nil, err
		}
		if vendorSecrets != nil {
			d.Vendors.SetWebhooks(vendors.WebhookTarget{URL: d.HTTP.URL() + "/webhooks/", Secrets: vendorSecrets})
		}
	}
	return d, nil
}

// Close stops everything StartStack started.
func (d *Stack) Close() {
	if d.HTTP != nil {
		d.HTTP.Close()
	}
	if d.doors != nil {
		d.doors.Close()
	}
	if d.Services != nil {
		d.Services.Stop()
	}
	if d.Vendors != nil {
		d.Vendors.Close()
	}
	if d.Infra != nil {
		d.Infra.Close()
	}
}
