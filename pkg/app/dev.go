package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/store"
	"github.com/opledger/opledger/pkg/telemetry"
	"github.com/opledger/opledger/pkg/vendors"
)

// VendorNames are the vendors of the example registry, all served by the
// local stand-in vendors in dev mode.
var VendorNames = []string{"payments", "email", "tickets", "crm", "accounts"}

// DevConfig configures a whole opledger in one process.
type DevConfig struct {
	Infra InfraConfig
	// RegistryPath is the tool registry (default examples/registry.yaml).
	RegistryPath string
	// RegistryYAML, when set, is used instead of RegistryPath.
	RegistryYAML []byte
	// HTTPAddr serves /metrics, /healthz, /v1/operations/{id} and
	// /v1/vendors/stats ("" = no HTTP server).
	HTTPAddr string
	// Services configures the services; DatabaseURL, NATSURL, Registry and
	// Metrics are filled in.
	Services ServicesConfig
	// VendorLatency delays every local vendor request.
	VendorLatency time.Duration
	Log           zerolog.Logger
}

// Dev is a running opledger: infrastructure, local vendors and all services.
type Dev struct {
	Infra    *Infra
	Vendors  *vendors.Server
	Registry *registry.Registry
	Services *Services
	Metrics  *telemetry.Metrics
	HTTPURL  string
	http     *http.Server
}

// StartDev starts everything.
func StartDev(ctx context.Context, cfg DevConfig) (_ *Dev, err error) {
	d := &Dev{}
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
	urls := map[string]string{}
	for _, v := range VendorNames {
		urls[v] = Getenv("OPLEDGER_VENDOR_"+strings.ToUpper(v)+"_URL", d.Vendors.URL())
	}
	data := cfg.RegistryYAML
	if data == nil {
		path := cfg.RegistryPath
		if path == "" {
			path = "examples/registry.yaml"
		}
		if data, err = os.ReadFile(path); err != nil {
			return nil, fmt.Errorf("registry: %w (pass -registry)", err)
		}
	}
	if d.Registry, err = registry.Load(data, registry.Options{Vendors: urls}); err != nil {
		return nil, err
	}
	promReg := prometheus.NewRegistry()
	promReg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	d.Metrics = telemetry.NewMetrics(promReg)

	sc := cfg.Services
	sc.DatabaseURL, sc.NATSURL, sc.Registry, sc.Metrics, sc.Log = d.Infra.DatabaseURL, d.Infra.NATSURL, d.Registry, d.Metrics, cfg.Log
	if d.Services, err = StartServices(ctx, sc); err != nil {
		return nil, err
	}
	if cfg.HTTPAddr != "" {
		ln, err := net.Listen("tcp", cfg.HTTPAddr)
		if err != nil {
			return nil, fmt.Errorf("http: %w", err)
		}
		d.HTTPURL = "http://" + ln.Addr().String()
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", promhttp.HandlerFor(promReg, promhttp.HandlerOpts{}))
		mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
			if err := d.Services.Store.Ping(r.Context()); err != nil {
				http.Error(w, "postgres unreachable", http.StatusServiceUnavailable)
				return
			}
			_, _ = io.WriteString(w, "ok\n")
		})
		mux.HandleFunc("GET /v1/operations/{id}", operationHandler(d.Services.Store))
		mux.HandleFunc("GET /v1/vendors/stats", func(w http.ResponseWriter, _ *http.Request) {
			writeJSON(w, http.StatusOK, d.Vendors.Stats())
		})
		d.http = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = d.http.Serve(ln) }()
	}
	return d, nil
}

// Close stops everything StartDev started.
func (d *Dev) Close() {
	if d.http != nil {
		_ = d.http.Close()
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

// operationView is what GET /v1/operations/{id} returns.
type operationView struct {
	Operation *op.Operation    `json:"operation"`
	Events    []op.EventRecord `json:"events"`
	Attempts  []*op.Attempt    `json:"attempts"`
}

func operationHandler(st *store.Store) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		o, err := st.Operation(r.Context(), id)
		if errors.Is(err, op.ErrNotFound) {
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "no such operation"})
			return
		} else if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "ledger unavailable"})
			return
		}
		v := operationView{Operation: o}
		if v.Events, err = st.Events(r.Context(), id); err == nil {
			v.Attempts, err = st.Attempts(r.Context(), id)
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": "ledger unavailable"})
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// loadRegistry reads a registry whose vendors come from OPLEDGER_VENDOR_<NAME>_URL.
func loadRegistry(path string) (*registry.Registry, error) {
	return registry.LoadFile(path, registry.Options{})
}
