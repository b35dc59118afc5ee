package main

import (
	"context"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/app"
	"github.com/opledger/opledger/internal/testdb"
)

func TestMain(m *testing.M) { testdb.Main(m) }

// The example does what README promises against a whole opledger (the
// services, Postgres, JetStream and the stand-in vendors, in this
// process): it returns the final result of a capture, and run again with
// the same event id (a resend) it is given the first answer again, about
// the same operation, which stays one charge.
func TestExampleClientCapturesOnce(t *testing.T) {
	t.Parallel()
	d, err := app.StartStack(context.Background(), app.StackConfig{
		Infra: app.InfraConfig{DatabaseURL: testdb.New(t), MemoryStreams: true},
	})
	require.NoError(t, err)
	t.Cleanup(d.Close)
	env := func(k string) string {
		if k == "NATS_URL" {
			return d.Infra.NATSURL
		}
		return ""
	}
	args := []string{"-event-id", "conv_ex:call_1", "-workflow", "wf_ex", "-order", "order_ex_1", "-timeout", "1m"}

	var out strings.Builder
	require.NoError(t, run(args, env, &out))
	require.Regexp(t, `^answer to conv_ex:call_1: new, operation "(op_\w+)", status pending_dispatch\n`+
		`final: completed_success, version \d+, vendor object "ch_\w+": The request was completed\.\n$`, out.String())
	id := regexp.MustCompile(`operation "(op_\w+)"`).FindStringSubmatch(out.String())[1]

	out.Reset()
	require.NoError(t, run(args, env, &out))
	require.Regexp(t, `^answer to conv_ex:call_1: new, operation "`+id+`", status pending_dispatch\n`+
		`final: completed_success, `, out.String())
	require.Equal(t, 1, d.Vendors.Stats().Captures, "one charge")
}
