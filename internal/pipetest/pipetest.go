// Package pipetest sets up the real parts of the pipeline for the services'
// tests: a fresh migrated Postgres database (internal/testdb), the ledger
// store, an embedded NATS server with in-memory streams, the local stand-in
// vendors, and the example registry pointed at them with short tool timeouts.
//
// Only the far edge is a stand-in (internal/vendors, a real HTTP server with fault
// injection and effect counts); everything else is the production code. A
// test package using it must call testdb.Main from its TestMain.
package pipetest

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/rs/zerolog"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/ingest"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/regedit"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// DefaultToolTimeout replaces every tool's timeout in the example registry, so
// a vendor that never answers costs a test half a second, not two or three.
// It stays far above a local vendor's answer time (about a millisecond).
const DefaultToolTimeout = 500 * time.Millisecond

// Options tune Start. The zero value is what most tests want.
type Options struct {
	// ToolTimeout overrides every tool's timeout (default DefaultToolTimeout).
	ToolTimeout time.Duration
	// Clock replaces the database's now() in the store's writes (see store.Options).
	Clock func() time.Time
	// Log receives the services' logs; the zero value logs nothing.
	Log zerolog.Logger
	// EditRegistry, when set, changes the example registry before it is
	// loaded (see internal/regedit).
	EditRegistry func([]byte) ([]byte, error)
	// ShippedApplyBound keeps every tool's apply_bound as the example
	// registry declares it, instead of DefaultApplyBound.
	ShippedApplyBound bool
}

// Env is one test's private pipeline infrastructure. Everything is closed in
// t.Cleanup.
type Env struct {
	Ctx      context.Context
	DBURL    string
	Store    *store.Store
	DB       *pgxpool.Pool // reads rows the store API does not expose (outbox columns)
	NATS     *natsembed.Server
	Bus      *bus.Bus
	JS       jetstream.JetStream
	Vendors  *vendors.Server
	Registry *registry.Registry
	Adapters map[string]adapter.Adapter
	Log      zerolog.Logger
}

// Start sets up a fresh Env for t.
func Start(t *testing.T, opts Options) *Env {
	t.Helper()
	if opts.ToolTimeout <= 0 {
		opts.ToolTimeout = DefaultToolTimeout
	}
	ctx := context.Background()
	e := &Env{Ctx: ctx, Log: opts.Log}

	e.DBURL = testdb.New(t)
	st, err := store.Open(ctx, e.DBURL, store.Options{MaxConns: 24, Clock: opts.Clock})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	e.Store = st
	e.DB, err = pgxpool.New(ctx, e.DBURL)
	require.NoError(t, err)
	t.Cleanup(e.DB.Close)

	e.NATS, err = natsembed.Start(natsembed.Options{})
	require.NoError(t, err)
	t.Cleanup(e.NATS.Shutdown)
	e.Bus, err = bus.Connect(ctx, e.NATS.URL(), t.Name(), opts.Log)
	require.NoError(t, err)
	t.Cleanup(e.Bus.Close)
	require.NoError(t, e.Bus.EnsureStreams(ctx, bus.StreamOptions{Memory: true}))
	e.JS, err = jetstream.New(e.Bus.Conn())
	require.NoError(t, err)

	e.Vendors, err = vendors.Start(vendors.Options{})
	require.NoError(t, err)
	t.Cleanup(e.Vendors.Close)

	e.Registry = loadRegistry(t, e.Vendors.URL(), opts.ToolTimeout, opts.ShippedApplyBound, opts.EditRegistry)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	t.Cleanup(client.CloseIdleConnections)
	e.Adapters, err = e.Registry.Adapters(client)
	require.NoError(t, err)
	return e
}

// DefaultApplyBound replaces the apply bound of every tool whose vendor does
// not deduplicate by our key: the stand-in vendors apply a request at once,
// or after a latency fault's delay, which tests keep below this.
const DefaultApplyBound = 2 * time.Second

// LoadRegistry loads examples/registry.yaml with every vendor at vendorURL,
// every tool's timeout set to timeout and, for tools without vendor
// idempotency, apply_bound set to DefaultApplyBound. The file is edited as
// a YAML tree, so the rest of it (schemas, retry policies, playbooks) is
// exactly what ships.
func LoadRegistry(t *testing.T, vendorURL string, timeout time.Duration) *registry.Registry {
	t.Helper()
	return loadRegistry(t, vendorURL, timeout, false, nil)
}

func loadRegistry(t *testing.T, vendorURL string, timeout time.Duration, shippedBound bool, edit func([]byte) ([]byte, error)) *registry.Registry {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(RepoRoot(t), "examples", "registry.yaml"))
	require.NoError(t, err)
	if edit != nil {
		data, err = edit(data)
		require.NoError(t, err)
	}
	data, err = regedit.Set(data, "timeout", timeout.String(), nil)
	require.NoError(t, err)
	if !shippedBound {
		data, err = regedit.Set(data, "apply_bound", max(DefaultApplyBound, timeout).String(), func(tl regedit.Tool) bool { return !tl.VendorIdempotency })
		require.NoError(t, err)
	}
	urls := map[string]string{}
	for _, v := range []string{"payments", "email", "tickets", "crm", "accounts"} {
		urls[v] = vendorURL
	}
	reg, err := registry.Load(data, registry.Options{Vendors: urls})
	require.NoError(t, err)
	return reg
}

// RepoRoot is the directory holding go.mod, found upwards from the test's
// working directory.
func RepoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "go.mod not found above the working directory")
		dir = parent
	}
}

// Tool returns a registered tool.
func (e *Env) Tool(t *testing.T, name string) *registry.Tool {
	t.Helper()
	tool, err := e.Registry.Tool(name)
	require.NoError(t, err)
	return tool
}

// Ingester is a planner-ingest service on this Env (no consumer started; call Ingest).
func (e *Env) Ingester() *ingest.Service {
	return ingest.New(ingest.Config{}, e.Store, e.Bus, e.Registry, nil, e.Log)
}

// IntentMsg is an intent as it arrives from NATS: its subject, headers and
// body. The headers carry Nats-Msg-Id = event id, as a client of another
// make may send it (pkg/client sends none; the ledger accepts it when it
// equals event_id, and JetStream ignores it on INTENTS).
func IntentMsg(t *testing.T, in wire.Intent) (subject string, header map[string]string, body []byte) {
	t.Helper()
	if in.Spec == "" {
		in.Spec = wire.SpecIntent
	}
	body, err := json.Marshal(in)
	require.NoError(t, err)
	return wire.IntentSubject(in.WorkflowID), map[string]string{wire.HeaderMsgID: in.EventID}, body
}

// CaptureArgs are capture_payment arguments for an order.
func CaptureArgs(orderID, customerID string, amountCents int) json.RawMessage {
	return json.RawMessage(fmt.Sprintf(`{"order_id":%q,"customer_id":%q,"amount_cents":%d,"currency":"USD"}`, orderID, customerID, amountCents))
}

// Submit ingests the intent through planner-ingest and returns the operation
// it created, which must be new.
func (e *Env) Submit(t *testing.T, in wire.Intent) *op.Operation {
	t.Helper()
	subject, header, body := IntentMsg(t, in)
	ans, err := e.Ingester().Ingest(e.Ctx, subject, header, body)
	require.NoError(t, err)
	require.Equal(t, op.DecisionNew, ans.Decision, "intent %s: %s", in.EventID, ans.Result.Reason)
	return e.Operation(t, ans.Result.OperationID)
}

// SubmitCapture ingests a capture_payment intent for orderID (4900 USD cents,
// below the approval threshold, so it goes straight to pending_dispatch).
func (e *Env) SubmitCapture(t *testing.T, workflowID, orderID string) *op.Operation {
	t.Helper()
	return e.Submit(t, wire.Intent{EventID: "evt_" + orderID, WorkflowID: workflowID, Tool: "capture_payment",
		Args: CaptureArgs(orderID, "cust_1", 4900)})
}

// Claim claims a pending operation for one attempt the way a dispatcher
// does: with its entity's lease when its tool needs one (whose TTL the
// clock decides), else plainly. The attempt's deadline is its tool's timeout.
func (e *Env) Claim(t *testing.T, o *op.Operation, worker string) (*op.Operation, *op.Attempt) {
	t.Helper()
	tool := e.Tool(t, o.Tool)
	var claimed *op.Operation
	var att *op.Attempt
	var err error
	if tool.Lease.Required {
		var leased []string
		for _, name := range e.Registry.Names() {
			if tl := e.Tool(t, name); tl.Lease.Required {
				leased = append(leased, name)
			}
		}
		claimed, att, err = e.Store.BeginLeasedAttempt(e.Ctx, o.ID, o.LeaseEpoch, worker, tool.Timeout,
			store.EntityLease{TTL: tool.Lease.TTL, Tools: leased})
	} else {
		claimed, att, err = e.Store.BeginAttempt(e.Ctx, o.ID, o.LeaseEpoch, worker, tool.Timeout)
	}
	require.NoError(t, err)
	return claimed, att
}

// Operation loads an operation from the ledger.
func (e *Env) Operation(t *testing.T, id string) *op.Operation {
	t.Helper()
	o, err := e.Store.Operation(e.Ctx, id)
	require.NoError(t, err)
	return o
}

// Row is one outbox message (a row of outbox, or one of a batch's) with
// every column a test may assert on.
type Row struct {
	// ID is the row's id, or the batch's seq (which orders it among rows).
	ID           int64
	Subject      string
	MsgID        string
	Header       map[string]string
	Payload      []byte
	OperationID  string
	AvailableAt  time.Time
	SentAt       *time.Time
	ClaimedBy    string
	PublishCount int
}

// Delivery is the row as a consumer would receive it from JetStream.
func (r Row) Delivery(delivered uint64) bus.Delivery {
	h := map[string]string{wire.HeaderMsgID: r.MsgID}
	for k, v := range r.Header {
		h[k] = v
	}
	return bus.Delivery{Subject: r.Subject, Header: h, Data: r.Payload, Delivered: delivered}
}

// Command decodes the row's payload as a command.
func (r Row) Command(t *testing.T) wire.Command {
	t.Helper()
	var c wire.Command
	require.NoError(t, json.Unmarshal(r.Payload, &c), "outbox row %d on %s", r.ID, r.Subject)
	return c
}

// Result decodes the row's payload as a result.
func (r Row) Result(t *testing.T) wire.Result {
	t.Helper()
	var res wire.Result
	require.NoError(t, json.Unmarshal(r.Payload, &res), "outbox row %d on %s", r.ID, r.Subject)
	return res
}

// Outbox returns every message of the outbox, rows and batches alike, in
// the order they were written.
func (e *Env) Outbox(t *testing.T) []Row {
	t.Helper()
	rows, err := e.DB.Query(e.Ctx, `SELECT seq, subject, msg_id, headers, payload, coalesce(operation_id, ''),
		available_at, sent_at, claimed_by, publish_count FROM outbox_messages ORDER BY seq, ord`)
	require.NoError(t, err)
	defer rows.Close()
	var out []Row
	for rows.Next() {
		var r Row
		var hdr []byte
		require.NoError(t, rows.Scan(&r.ID, &r.Subject, &r.MsgID, &hdr, &r.Payload, &r.OperationID,
			&r.AvailableAt, &r.SentAt, &r.ClaimedBy, &r.PublishCount))
		require.NoError(t, json.Unmarshal(hdr, &r.Header))
		out = append(out, r)
	}
	require.NoError(t, rows.Err())
	return out
}

// Published does to an operation's waiting messages what a relay does once
// JetStream has them, but keeps them for the test to read: its rows of
// outbox are marked sent, and the batches holding its messages become such
// rows (every message of those batches, in the order written).
func (e *Env) Published(t *testing.T, operationID string) {
	t.Helper()
	_, err := e.DB.Exec(e.Ctx, `WITH gone AS (
			DELETE FROM outbox_batches WHERE $1 = ANY(operation_ids) RETURNING *
		), moved AS (
			INSERT INTO outbox (subject, msg_id, headers, payload, operation_id, created_at, available_at, sent_at)
			SELECT m.subject, m.msg_id, m.headers, m.payload, nullif(m.operation_id, ''), gone.created_at, gone.available_at, now()
			FROM gone CROSS JOIN LATERAL unnest(gone.subjects, gone.msg_ids, gone.headers, gone.payloads, gone.operation_ids)
				WITH ORDINALITY AS m(subject, msg_id, headers, payload, operation_id, ord)
			ORDER BY gone.seq, m.ord
		)
		UPDATE outbox SET sent_at = now() WHERE operation_id = $1 AND sent_at IS NULL`, operationID)
	require.NoError(t, err)
}

// OutboxOf returns an operation's outbox messages in the order written.
func (e *Env) OutboxOf(t *testing.T, operationID string) []Row {
	t.Helper()
	var out []Row
	for _, r := range e.Outbox(t) {
		if r.OperationID == operationID {
			out = append(out, r)
		}
	}
	return out
}

// Commands returns an operation's outbox rows that are commands of kind.
func (e *Env) Commands(t *testing.T, o *op.Operation, kind string) []Row {
	t.Helper()
	var out []Row
	for _, r := range e.OutboxOf(t, o.ID) {
		if r.Subject == wire.OpsSubject(kind, o.Tool, o.ID) {
			out = append(out, r)
		}
	}
	return out
}

// LastCommand returns the newest command of kind for o, failing if there is none.
func (e *Env) LastCommand(t *testing.T, o *op.Operation, kind string) Row {
	t.Helper()
	cmds := e.Commands(t, o, kind)
	require.NotEmpty(t, cmds, "operation %s has no %s command in the outbox", o.ID, kind)
	return cmds[len(cmds)-1]
}

// Results returns every result in the outbox, in order.
func (e *Env) Results(t *testing.T) []wire.Result {
	t.Helper()
	var out []wire.Result
	for _, r := range e.Outbox(t) {
		if strings.HasPrefix(r.Subject, wire.ResultSubjectPrefix) {
			out = append(out, r.Result(t))
		}
	}
	return out
}

// StreamMsgs is how many messages a JetStream stream holds.
func (e *Env) StreamMsgs(t *testing.T, stream string) uint64 {
	t.Helper()
	s, err := e.JS.Stream(e.Ctx, stream)
	require.NoError(t, err)
	info, err := s.Info(e.Ctx)
	require.NoError(t, err)
	return info.State.Msgs
}
