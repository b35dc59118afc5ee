package redact_test

import (
	"errors"
	"net/url"
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

// Fuzzing: a secret put in a credential's place of any URL shape (a
// password, a NATS token, a query password, a keyword/value password, a
// list of NATS URLs) never survives URL or Error, raw or percent-encoded;
// and no input makes either panic.
func FuzzURL(f *testing.F) {
	f.Add(uint8(0), "svc", "pw1234", "db:5432")
	f.Add(uint8(1), "u", "t0ken-x", "nats:4222")
	f.Add(uint8(2), "u", "p@ss:w/rd?#", "h")
	f.Add(uint8(3), "u", "päss wörd", "h")
	f.Add(uint8(4), "", "s3cr3t", "[::1]:4222")
	f.Add(uint8(5), "u", "x'y\\z", "h")
	f.Fuzz(func(t *testing.T, shape uint8, user, secret, host string) {
		_ = URLNoPanic(user + secret + host)
		if len(secret) < 6 || !validHost(host) || !validHost(user) || strings.Contains(host+user, secret) {
			return
		}
		var in string
		switch shape % 6 {
		case 0:
			in = "postgres://" + url.UserPassword(user, secret).String() + "@" + host + "/db"
		case 1:
			in = "nats://" + url.User(secret).String() + "@" + host
		case 2:
			in = "postgres://" + host + "/db?sslmode=disable&password=" + url.QueryEscape(secret)
		case 3:
			in = "host=" + host + " user=" + user + " password='" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(secret) + "' dbname=x"
		case 4:
			in = "nats://" + url.UserPassword(user, secret).String() + "@" + host + ",tls://" + url.User(secret).String() + "@" + host
		case 5:
			in = url.UserPassword(user, secret).String() + "@" + host
		}
		if strings.Contains(strings.ReplaceAll(in, secret, ""), "@@") {
			return
		}
		got := redact.URL(in)
		for _, form := range []string{secret, url.PathEscape(secret), url.QueryEscape(secret), url.UserPassword("", secret).String()[1:]} {
			if len(form) >= 6 && strings.Contains(got, form) {
				t.Fatalf("URL(%q) = %q keeps the secret (%q)", in, got, form)
			}
		}
		if e := redact.Error(errors.New("failed: "+in+" / "+secret), in); strings.Contains(e, secret) {
			t.Fatalf("Error quotes the secret: %q", e)
		}
	})
}

// URLNoPanic runs URL and Error on anything.
func URLNoPanic(s string) string {
	return redact.URL(s) + redact.Error(errors.New(s), s, s+"x")
}

func validHost(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' || r == ':' || r == '[' || r == ']') {
			return false
		}
	}
	return true
}
