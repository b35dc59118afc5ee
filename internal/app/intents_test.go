package app

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
)

// With the agents' secrets directory, the intent API connects for each
// tenant as that tenant's agent, with the tenant's inbox, keeping only the
// TLS settings of the service; without it, as the service.
func TestIntentNATSIdentity(t *testing.T) {
	t.Parallel()
	base := bus.Auth{User: PlannerIngest, PasswordFile: "/run/secrets/planner-ingest.password", TLSCA: "/ca.pem",
		InboxPrefix: ServiceInboxPrefix(PlannerIngest)}
	n := IntentNATS{URL: "nats://x", Base: base, SecretsDir: "/run/agents"}
	require.Equal(t, bus.Auth{User: "agent-acme", PasswordFile: "/run/agents/agent-acme.password", TLSCA: "/ca.pem"}, n.auth("acme"))
	require.Equal(t, "agent-default", n.auth("default").User)
	require.NoError(t, n.auth("acme").Validate())

	token := IntentNATS{Base: bus.Auth{TokenFile: "/t", TLSRequire: true}, SecretsDir: "/run/agents"}
	require.Equal(t, bus.Auth{User: "agent-acme", PasswordFile: "/run/agents/agent-acme.password", TLSRequire: true}, token.auth("acme"),
		"one credential: the service's token is dropped")

	n.SecretsDir = ""
	require.Equal(t, base, n.auth("acme"))
}
