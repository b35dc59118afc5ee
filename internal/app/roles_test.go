package app_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/pglocal"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/internal/vendors"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
	"github.com/opledger/opledger/schema"
)

// TestRolesCanDoTheirJobs runs every service and part logged in as its own
// user, a member of only its Postgres role, and walks the jobs that touch
// each role's grants: intake with an approval request (ingest), an
// operator's approval (api), a dispatch under an entity lease (dispatcher),
// an outcome lost by the vendor settled by lookup (reconciler), an
// operator's compensation with its own approval and dispatch, maintenance
// leadership (maintainer) and every message through the outbox (relay).
// A grant missing from schema/grants.sql fails the step that needs it
// (permission denied, 42501, in the service's log and a stuck operation).
func TestRolesCanDoTheirJobs(t *testing.T) {
	t.Parallel()
	cs := testdb.New(t)
	users := roleUsers(t, cs)
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: cs, MemoryStreams: true},
		Services: app.ServicesConfig{Relays: 1, DatabaseURLs: users,
			Reconcile: reconcileFast, Maintain: maintainFast},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	st := d.Services.Store // the test reads as the database's owner
	operator := ops.New(d.Services.StoreFor(app.PartAPI), d.Registry)
	require.NotSame(t, st, d.Services.StoreFor(app.PartAPI), "the API has its own login")

	cl, err := client.Connect(d.Infra.NATSURL, "roles-agent")
	require.NoError(t, err)
	defer cl.Close()
	publish := func(wf, eventID, tool, args string) {
		require.NoError(t, cl.Publish(ctx, wire.Intent{EventID: eventID, WorkflowID: wf, Tool: tool, Args: json.RawMessage(args),
			Actor: &wire.Actor{Type: "agent", ID: "roles-agent"}}, ""))
	}
	waitFor := func(wf string, want op.State) *op.Operation {
		t.Helper()
		for {
			list, err := st.OperationsByWorkflow(ctx, wf)
			require.NoError(t, err)
			for _, o := range list {
				if o.State == want {
					return o
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("workflow %s: no operation reached %s (have %v); a service's log says which permission it lacks", wf, want, states(list))
			case <-time.After(50 * time.Millisecond):
			}
		}
	}

	// Intake opens an approval request; an operator approves; a dispatcher
	// takes the customer's lease and captures.
	publish("wf_big", "conv_big:call_1", "capture_payment", `{"order_id":"order_big","customer_id":"cust_1","amount_cents":2000000,"currency":"USD"}`)
	big := waitFor("wf_big", op.StateAwaitingApproval)
	_, err = operator.Approve(ctx, ops.Actor{ID: "alice", Role: ops.RoleApprover}, big.ID, big.ArgsHash, "checked the order")
	require.NoError(t, err)
	big = waitFor("wf_big", op.StateCompletedSuccess)

	// The vendor charges and answers 500: unknown outcome, settled by the
	// reconciler's lookup.
	require.NoError(t, d.Vendors.InjectFault(vendors.Fault{Route: vendors.RouteCapture, Kind: vendors.FaultError500AfterCommit, Times: 1}))
	publish("wf_lost", "conv_lost:call_1", "capture_payment", `{"order_id":"order_lost","customer_id":"cust_2","amount_cents":500,"currency":"USD"}`)
	lost := waitFor("wf_lost", op.StateCompletedSuccess)
	evs, err := st.Events(ctx, lost.ID)
	require.NoError(t, err)
	require.Contains(t, fmt.Sprint(evs), string(op.StateUnknownOutcome), "the outcome was lost and reconciled")

	// An operator compensates the big capture; the refund is denied, which
	// hands the capture back, and it is compensated again: a refund,
	// approved by someone else, dispatched; the capture ends compensated.
	denied, err := operator.Compensate(ctx, ops.Actor{ID: "carol", Role: ops.RoleOperator}, big.ID, "customer says the goods are back")
	require.NoError(t, err)
	_, err = operator.Deny(ctx, ops.Actor{ID: "bob", Role: ops.RoleApprover}, denied.ID, "they are not back yet")
	require.NoError(t, err)
	back, err := st.Operation(ctx, big.ID)
	require.NoError(t, err)
	require.Equal(t, op.StateCompletedSuccess, back.State)
	refund, err := operator.Compensate(ctx, ops.Actor{ID: "carol", Role: ops.RoleOperator}, big.ID, "customer returned the goods")
	require.NoError(t, err)
	require.NotEqual(t, denied.ID, refund.ID)
	require.Equal(t, op.StateAwaitingApproval, refund.State)
	_, err = operator.Approve(ctx, ops.Actor{ID: "bob", Role: ops.RoleApprover}, refund.ID, refund.ArgsHash, "refund approved")
	require.NoError(t, err)
	waitFor("wf_big", op.StateCompensated)
	require.Equal(t, 1, d.Vendors.Stats().Refunds)

	// The maintainer leads.
	for {
		holder, _, err := st.Leader(ctx)
		if err == nil && holder != "" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no maintenance leader recorded: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
	}

	// Each part is connected as its own user, a member of its role only.
	conn, err := pgx.Connect(ctx, cs)
	require.NoError(t, err)
	defer conn.Close(context.WithoutCancel(ctx))
	rows, err := conn.Query(ctx, `SELECT DISTINCT usename::text FROM pg_stat_activity WHERE datname = current_database()`)
	require.NoError(t, err)
	connected, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	for part, url := range users {
		cfg, err := pgconn.ParseConfig(url)
		require.NoError(t, err)
		require.Contains(t, connected, cfg.User, "%s is connected as its own user", part)
		var roles []string
		require.NoError(t, conn.QueryRow(ctx, `SELECT array_agg(g.rolname::text) FROM pg_auth_members m
			JOIN pg_roles g ON g.oid = m.roleid JOIN pg_roles u ON u.oid = m.member WHERE u.rolname = $1`, cfg.User).Scan(&roles))
		require.Equal(t, []string{app.DBRoles[part]}, roles, "%s's user is in its role only", part)
		require.Contains(t, schema.Roles, app.DBRoles[part])
	}
}

func states(list []*op.Operation) []string {
	var s []string
	for _, o := range list {
		s = append(s, o.Tool+":"+string(o.State))
	}
	return s
}

// TestDevModeRunsServicesAsRoles starts a stack on its own private cluster
// the way `opledger dev` does (RoleUsers): every service and part gets a
// login user in its role, and an intent still completes. Without RoleUsers
// Infra.DatabaseURLs would be nil and the first check fails; with a missing
// grant the intent never completes.
func TestDevModeRunsServicesAsRoles(t *testing.T) {
	t.Parallel()
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra:    app.InfraConfig{MemoryStreams: true, RoleUsers: true},
		Services: app.ServicesConfig{Relays: 1, Reconcile: reconcileFast, Maintain: maintainFast},
	})
	if ci, _ := strconv.ParseBool(os.Getenv("CI")); !ci && errors.Is(err, pglocal.ErrBinariesNotFound) {
		t.Skip(err) // CI=true fails instead
	}
	require.NoError(t, err)
	t.Cleanup(d.Close)
	require.Len(t, d.Infra.DatabaseURLs, len(app.DBRoles))
	for part := range app.DBRoles {
		require.NotSame(t, d.Services.Store, d.Services.StoreFor(part), "%s has its own login", part)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cl, err := client.Connect(d.Infra.NATSURL, "dev-agent")
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Publish(ctx, wire.Intent{EventID: "conv_dev:call_1", WorkflowID: "wf_dev", Tool: "send_email",
		Args: json.RawMessage(`{"to":"user@example.com","template":"payment_receipt","reference":"order_dev"}`)}, ""))
	for {
		list, err := d.Services.Store.OperationsByWorkflow(ctx, "wf_dev")
		require.NoError(t, err)
		if len(list) == 1 && list[0].State == op.StateCompletedSuccess {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the intent did not complete: %v", states(list))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestSetRolesOnOneLogin runs every part on the owner's login with SetRoles:
// each part's pool takes its role with SET ROLE, so an intent completes and
// yet the relay's store may not read operations (42501). Without the SET
// ROLE the relay's read would succeed as the owner's.
func TestSetRolesOnOneLogin(t *testing.T) {
	t.Parallel()
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra:    app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
		Services: app.ServicesConfig{Relays: 1, SetRoles: true, Reconcile: reconcileFast, Maintain: maintainFast},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	_, err = d.Services.StoreFor(app.PartRelay).OperationsByWorkflow(ctx, "wf_any")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "42501", pgErr.Code, "the relay runs as opledger_relay, which may not read operations")

	cl, err := client.Connect(d.Infra.NATSURL, "setrole-agent")
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.Publish(ctx, wire.Intent{EventID: "conv_sr:call_1", WorkflowID: "wf_sr", Tool: "send_email",
		Args: json.RawMessage(`{"to":"user@example.com","template":"payment_receipt","reference":"order_sr"}`)}, ""))
	for {
		list, err := d.Services.Store.OperationsByWorkflow(ctx, "wf_sr")
		require.NoError(t, err)
		if len(list) == 1 && list[0].State == op.StateCompletedSuccess {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the intent did not complete: %v", states(list))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
