package app_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/testlog"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/wire"
)

// jsonLines parses what a logger wrote into its JSON lines; other lines
// are skipped.
func jsonLines(logged string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(logged))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil {
			out = append(out, m)
		}
	}
	return out
}

// Every line the stack logs (the services, the operators' API and the HTTP
// server of dev and demo) says which service and which instance it comes
// from, and a vendor refusing the connection is a warning. The tickets
// vendor is pointed at a closed port; one ticket intent and a request to
// /readyz without a token make the lines.
func TestEveryLogLineNamesServiceAndInstance(t *testing.T) {
	t.Parallel()
	cs := testdb.New(t)
	var logs testlog.Buffer
	log := zerolog.New(&logs).Level(zerolog.DebugLevel).With().Timestamp().Logger()
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra:    app.InfraConfig{DatabaseURL: cs, MemoryStreams: true, Log: zerolog.Nop()},
		Registry: app.RegistryConfig{Vendors: map[string]string{"tickets": "http://127.0.0.1:1"}},
		HTTPAddr: "127.0.0.1:0",
		Services: app.ServicesConfig{Dispatchers: 1, Relays: 1, DatabaseURLs: roleUsers(t, cs),
			Reconcile: reconcileFast, Maintain: maintainFast},
		Log: log,
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	resp, err := http.Get(d.HTTP.URL() + "/readyz")
	require.NoError(t, err)
	resp.Body.Close()
	cl, err := client.Connect(d.Infra.NATSURL, "log-agent")
	require.NoError(t, err)
	defer cl.Close()
	_, err = cl.Submit(ctx, wire.Intent{EventID: "conv_log:call_1", WorkflowID: "wf_log", Tool: "create_ticket",
		Args: json.RawMessage(`{"conversation_id":"conv_log","queue":"billing","summary":"a ticket nobody can open"}`)})
	require.NoError(t, err)

	refused := func() bool {
		for _, l := range jsonLines(logs.String()) {
			if l["message"] == "attempt recorded" && l["error_category"] != "" && l["error_category"] != nil {
				require.Equal(t, "warn", l["level"], "a failed attempt is logged at %v: %v", l["level"], l)
				return true
			}
		}
		return false
	}
	require.Eventually(t, refused, 30*time.Second, 100*time.Millisecond, "no attempt against the closed port was logged")
	d.Close()

	lines := jsonLines(logs.String())
	require.NotEmpty(t, lines)
	services := map[string]bool{}
	for _, l := range lines {
		service, _ := l["service"].(string)
		instance, _ := l["instance"].(string)
		require.True(t, service != "" && instance != "", "a line without its service or instance: %v", l)
		services[service] = true
	}
	for _, s := range []string{"planner-ingest", "dispatcher", "api"} {
		require.True(t, services[s], "no line from %s (lines came from %v)", s, strings.Join(keys(services), ", "))
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// NewLogger: console is zerolog's human-readable line (no JSON, no colour
// codes off a terminal), json is one object a line, auto is json when not
// on a terminal; an unknown format or level is refused, naming the choices.
func TestLoggerFormats(t *testing.T) {
	t.Parallel()
	line := func(format string) string {
		t.Helper()
		var b bytes.Buffer
		lg, err := app.NewLogger(&b, "info", format)
		require.NoError(t, err)
		lg.Warn().Str("service", "dispatcher").Int64("latency_ms", 12).Msg("attempt recorded")
		return b.String()
	}
	console := line(app.LogConsole)
	require.Contains(t, console, "WRN")
	require.Contains(t, console, "attempt recorded")
	require.Contains(t, console, "service=dispatcher")
	require.Contains(t, console, "latency_ms=12")
	require.NotContains(t, console, "\x1b[", "no colour codes when the output is not a terminal")
	require.False(t, json.Valid([]byte(strings.TrimSpace(console))), "console is not JSON: %s", console)

	for _, format := range []string{app.LogJSON, app.LogAuto} {
		var v map[string]any
		require.NoError(t, json.Unmarshal([]byte(line(format)), &v), format)
		require.Equal(t, "warn", v["level"], format)
		require.Equal(t, "dispatcher", v["service"], format)
		require.EqualValues(t, 12, v["latency_ms"], format)
	}

	_, err := app.NewLogger(io.Discard, "info", "pretty")
	require.ErrorContains(t, err, `unknown log format "pretty" (use json, console or auto)`)
	_, err = app.NewLogger(io.Discard, "loud", app.LogJSON)
	require.ErrorContains(t, err, `unknown log level "loud"`)
}
