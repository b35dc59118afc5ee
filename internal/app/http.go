package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/api"
)

// Check is one readiness check's verdict.
type Check struct {
	Name   string `json:"name"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail,omitempty"`
}

// HTTPConfig configures the operational HTTP endpoints of a process.
type HTTPConfig struct {
	// Addr to listen on, e.g. 127.0.0.1:8480 or :8480; port 0 picks a free one.
	Addr string
	// Gatherer serves GET /metrics.
	Gatherer prometheus.Gatherer
	// Ready runs the readiness checks of GET /readyz; nil is always ready.
	Ready func(ctx context.Context) []Check
	// Routes, when set, adds routes to the mux: the operators' API
	// (internal/api) and, in a stack, the local vendors' statistics. They
	// authenticate themselves: the API's routes by bearer token, routes
	// under /webhooks/ by the vendor's signature.
	Routes func(*http.ServeMux)
	// Guard authenticates /metrics and /readyz: a token of any role, or
	// none from loopback when it was configured so (api.GuardConfig). nil
	// refuses them (503): they are never open by default.
	Guard *api.Guard
	// Log receives a handler's panic (its type and stack, never its value)
	// and the server's own errors.
	Log zerolog.Logger
}

// HTTPServer serves /healthz (liveness: the process answers; the one
// route without a credential), /metrics and /readyz (every readiness check
// passes; 503 with the failing checks otherwise), both behind the Guard,
// and, when configured, the operators' API.
type HTTPServer struct {
	srv *http.Server
	url string
}

// ServeHTTP listens on cfg.Addr and serves until Close.
func ServeHTTP(cfg HTTPConfig) (*HTTPServer, error) {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("http: listen %s: %w", cfg.Addr, err)
	}
	mux := http.NewServeMux()
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", cfg.Guard.Probe(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.Handle("GET /readyz", cfg.Guard.Probe(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var checks []Check
		if cfg.Ready != nil {
			ctx, cancel := context.WithTimeout(r.Context(), 3*time.Second)
			checks = cfg.Ready(ctx)
			cancel()
		}
		ready := true
		for _, c := range checks {
			ready = ready && c.OK
		}
		status := http.StatusOK
		if !ready {
			status = http.StatusServiceUnavailable
		}
		writeJSON(w, status, map[string]any{"ready": ready, "checks": checks})
	})))
	if cfg.Routes != nil {
		cfg.Routes(mux)
	}
	s := &HTTPServer{srv: &http.Server{Handler: recoverPanics(mux, cfg.Log), ReadHeaderTimeout: 5 * time.Second,
		ErrorLog: log.New(serverLog{cfg.Log}, "", 0)}, url: "http://" + ln.Addr().String()}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

// recoverPanics answers a handler's panic 500 and logs its type and stack,
// never its value (which may quote a request, an argument or a token):
// net/http would otherwise log the value itself. http.ErrAbortHandler is
// net/http's own way to abort a response, and passes through.
func recoverPanics(h http.Handler, lg zerolog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil {
				return
			}
			if v == http.ErrAbortHandler {
				panic(v)
			}
			lg.Error().Str("method", r.Method).Str("path", clipPath(r.URL.Path)).Str("panic_type", fmt.Sprintf("%T", v)).
				Str("stack", string(debug.Stack())).Msg("http handler panicked")
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusInternalServerError)
			_, _ = io.WriteString(w, `{"error":{"code":"internal","message":"internal error; the server's log has the details"}}`+"\n")
		}()
		h.ServeHTTP(w, r)
	})
}

func clipPath(p string) string {
	if len(p) > 128 {
		return p[:128] + "…"
	}
	return p
}

// serverLog takes net/http's own error lines (bad requests, TLS
// handshakes) into the process's log.
type serverLog struct{ lg zerolog.Logger }

func (s serverLog) Write(p []byte) (int, error) {
	s.lg.Warn().Str("error", strings.TrimSpace(string(p))).Msg("http server")
	return len(p), nil
}

// URL is the server's base URL.
func (s *HTTPServer) URL() string { return s.url }

// Close stops serving.
func (s *HTTPServer) Close() { _ = s.srv.Close() }

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
