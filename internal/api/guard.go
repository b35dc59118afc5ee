package api

import (
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/telemetry"
)

// GuardConfig configures a Guard.
type GuardConfig struct {
	// Tokens authenticate requests; nil refuses every one (503 "no API
	// tokens configured"), except on loopback with OpenOnLoopback.
	Tokens *Tokens
	// OpenOnLoopback lets a request from a loopback address (127.0.0.0/8,
	// ::1) reach the probe routes (Probe: /metrics, /readyz) without a
	// token: for a container's own healthcheck. Off by default; never for
	// the API's routes.
	OpenOnLoopback bool
	// Registerer receives opledger_api_unauthorized_total; nil records none.
	Registerer prometheus.Registerer
	Log        zerolog.Logger
}

// Guard authenticates HTTP requests by bearer token: the API's routes, and
// the operational routes every process serves (/metrics, /readyz), which
// any role may read, the metrics role (for scrapers and probes) included.
// Routes under /webhooks/ are not its business: vendors authenticate by
// signature. The zero Guard refuses everything.
type Guard struct {
	cfg          GuardConfig
	unauthorized *prometheus.CounterVec
	// refusedLog bounds the warnings of refused tokens, which anyone who
	// reaches the port can cause (opledger_api_unauthorized_total counts
	// every one).
	refusedLog *telemetry.LogLimit
}

// NewGuard returns a Guard whose refusals are counted in cfg.Registerer.
func NewGuard(cfg GuardConfig) (*Guard, error) {
	g := &Guard{cfg: cfg, unauthorized: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "opledger_api_unauthorized_total",
		Help: "HTTP requests (the API, /metrics, /readyz) refused before any role check, by reason: missing, malformed or unknown token, or no tokens configured (not_configured).",
	}, []string{"reason"}), refusedLog: telemetry.NewLogLimit(refusedLogBurst, refusedLogPeriod)}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(g.unauthorized); err != nil {
			return nil, fmt.Errorf("api: metrics: %w", err)
		}
	}
	return g, nil
}

// Probe wraps an operational route (/metrics, /readyz): a token of any
// role but an agent's (403), or, with OpenOnLoopback, none from a loopback
// address.
func (g *Guard) Probe(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if g != nil && g.cfg.OpenOnLoopback && loopback(r.RemoteAddr) {
			h.ServeHTTP(w, r)
			return
		}
		actor, err := g.Authenticate(r)
		if err == nil && actor.Role == ops.RoleAgent {
			// An agent's token is for its tenant's intents: the process's
			// metrics and readiness speak of every tenant.
			err = fmt.Errorf("%s is an agent, bound to tenant %s: %w", actor.ID, actor.Tenant, ops.ErrForbidden)
		}
		if err != nil {
			g.fail(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Any wraps a route any role may call, always with a token.
func (g *Guard) Any(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := g.Authenticate(r); err != nil {
			g.fail(w, r, err)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (g *Guard) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := classify(err)
	if status == http.StatusUnauthorized {
		w.Header().Set("WWW-Authenticate", `Bearer realm="opledger"`)
	}
	writeJSON(w, status, ErrorBody{Error: ErrorDetail{Code: code, Message: msg}})
}

// loopback reports whether a request's remote address is a loopback one.
func loopback(remote string) bool {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Authenticate returns the actor whose bearer token the request carries, of
// any role. Errors: errUnauthenticated (401), errNoTokens (503).
func (g *Guard) Authenticate(r *http.Request) (ops.Actor, error) {
	var cfg GuardConfig
	if g != nil {
		cfg = g.cfg
	}
	refuse := func(reason, why string) (ops.Actor, error) {
		if g != nil && g.unauthorized != nil {
			g.unauthorized.WithLabelValues(reason).Inc()
		}
		// A token that was offered and refused is worth a warning; a request
		// without one (a probe, a scanner) or to a process without tokens
		// (warned about at start) is counted only.
		var ev *zerolog.Event
		if reason != "missing" && reason != "not_configured" {
			var limit *telemetry.LogLimit
			if g != nil {
				limit = g.refusedLog
			}
			ev = limit.Event(cfg.Log.Warn, "refusals_not_logged_before")
		}
		if ev == nil {
			ev = cfg.Log.Debug()
		}
		ev.Str("reason", reason).Str("remote", r.RemoteAddr).Str("path", clip(r.URL.Path)).Msg("api: request refused before authentication")
		if reason == "not_configured" {
			return ops.Actor{}, errNoTokens
		}
		return ops.Actor{}, fmt.Errorf("%s: %w", why, errUnauthenticated)
	}
	if cfg.Tokens == nil {
		return refuse("not_configured", "")
	}
	hs := r.Header.Values("Authorization")
	if len(hs) == 0 {
		return refuse("missing", "no Authorization header")
	}
	scheme, token, ok := strings.Cut(hs[0], " ")
	if len(hs) > 1 || !ok || !strings.EqualFold(scheme, "Bearer") || token == "" || len(token) > MaxTokenLen ||
		strings.ContainsAny(token, " \t") {
		return refuse("malformed", `the Authorization header must be "Bearer <token>"`)
	}
	actor, ok := cfg.Tokens.Lookup(token)
	if !ok {
		return refuse("unknown", "the token is not known")
	}
	return actor, nil
}
