package redact_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/redact"
)

const canary = "CANARY-not-a-secret-7f3a"

// Every shape of connection string that can carry a credential prints
// without it, and keeps what an operator needs to tell servers apart (host,
// port, database, a Postgres user name). Breaking it: a token-only URL
// (nats://TOKEN@host) printed as is because url.User has no password, a
// user information without password in a Postgres URL masked (it is a name,
// not a secret), or a query-string password kept.
func TestURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://u:" + canary + "@h:4222":                       "nats://u:***@h:4222",
		"nats://" + canary + "@nats:4222":                      "nats://***@nats:4222",
		"tls://u:" + canary + "@a:1,nats://" + canary + "@b:2": "tls://u:***@a:1,nats://***@b:2",
		"nats://h:4222":                 "nats://h:4222",
		"h:4222":                        "h:4222",
		"u:" + canary + "@h:4222":       "nats://u:***@h:4222",
		canary + "@h:4222":              "nats://***@h:4222",
		"nats://u:p%zz" + canary + "@h": redact.Unparsable,
		"postgres://alice:" + canary + "@db:5432/ledger?sslmode=disable":            "postgres://alice:***@db:5432/ledger?sslmode=disable",
		"postgres://alice@db/ledger":                                                "postgres://alice@db/ledger",
		"postgresql://db/ledger?user=alice&password=" + canary + "&sslmode=require": "postgresql://db/ledger?user=alice&password=***&sslmode=require",
		"postgres://db/ledger?sslpassword=" + canary:                                "postgres://db/ledger?sslpassword=***",
		"postgres://db/ledger?PassWord=" + canary:                                   "postgres://db/ledger?PassWord=***",
		"nats://h:4222?token=" + canary:                                             "nats://h:4222?token=***",
		"host=/tmp/s port=5433 user=postgres password=" + canary + " dbname=x":      "host=/tmp/s port=5433 user=postgres password=*** dbname=x",
		"host=db password='" + canary + " with space' dbname=x":                     "host=db password=*** dbname=x",
		"host=db user=u sslpassword=" + canary:                                      "host=db user=u sslpassword=***",
		"postgres://u:" + canary + "@db/x#" + canary:                                "postgres://u:***@db/x#***",
	} {
		got := redact.URL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, canary, in)
		require.NotContains(t, got, "7f3a", in)
	}
}

// An error text that quotes a connection string, whole or in parts (the
// password alone, the token alone, decoded), loses every credential.
// Breaking it: replacing only the whole URL, so a driver that prints
// "password=<it>" or the host with its user information leaks it.
func TestError(t *testing.T) {
	t.Parallel()
	urls := []string{
		"nats://" + canary + "@nats:4222",
		"nats://svc:" + canary + "@nats:4222",
		"postgres://svc:" + canary + "@db:5432/x",
		"postgres://svc:CANARY%2Dnot%2Da%2Dsecret%2D7f3a@db:5432/x",
		"postgres://db/x?password=" + canary,
		"host=db password=" + canary,
		"host=db password='" + canary + "'",
	}
	for _, u := range urls {
		for _, msg := range []string{
			"dial " + u + ": connection refused",
			"auth failed for token " + canary,
			"failed to connect to `user=svc password=" + canary + " host=db`",
			"nats: " + strings.TrimPrefix(u, "nats://"),
		} {
			got := redact.Error(errors.New(msg), u)
			require.NotContains(t, got, canary, "%s in %q", u, msg)
		}
	}
	require.Equal(t, "", redact.Error(nil, urls...))
	require.Equal(t, "plain", redact.Error(errors.New("plain"), "", "h:4222"))
}

// Fuzzing: whatever the input, a secret planted in a password or a token
// position never survives URL.
func FuzzURL(f *testing.F) {
	for _, s := range []string{"nats://u:%s@h:1", "nats://%s@h", "%s@h:1", "postgres://u:%s@h/db", "postgres://h/db?password=%s", "host=h password=%s"} {
		f.Add(s, "pw1234")
	}
	f.Fuzz(func(t *testing.T, format, secret string) {
		if !strings.Contains(format, "%s") || strings.Count(format, "%") != 1 || len(secret) < 6 {
			return
		}
		// Only secrets that fit in the position as a value.
		if strings.ContainsAny(secret, "@/:?#&=,' \t\n\\%") {
			return
		}
		in := strings.Replace(format, "%s", secret, 1)
		if strings.Count(in, secret) != 1 {
			return // the secret is also a keyword or a host name
		}
		if !strings.Contains(in, "password="+secret) && !strings.Contains(in, ":"+secret+"@") && !strings.Contains(in, "://"+secret+"@") {
			return
		}
		got := redact.URL(in)
		if strings.HasPrefix(in, "postgres") && strings.Contains(in, "://"+secret+"@") {
			return // a Postgres user name, not a secret
		}
		if strings.Contains(got, secret) {
			t.Fatalf("URL(%q) = %q keeps the secret", in, got)
		}
	})
}
