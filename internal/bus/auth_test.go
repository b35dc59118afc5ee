package bus_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/pkg/op"
)

// Misconfigurations are refused before anything dials. Breaking it: a
// Validate that accepts two kinds of credential (which one would win is
// nats.go's choice, not the operator's).
func TestAuthValidate(t *testing.T) {
	t.Parallel()
	for name, a := range map[string]bus.Auth{
		"password without user":  {Password: "x"},
		"user without password":  {User: "u"},
		"password twice":         {User: "u", Password: "x", PasswordFile: "/f"},
		"token twice":            {Token: "t", TokenFile: "/f"},
		"user and token":         {User: "u", Password: "x", Token: "t"},
		"nkey and creds":         {NkeySeedFile: "/a", CredsFile: "/b"},
		"cert without key":       {TLSCert: "/c"},
		"key without cert":       {TLSKey: "/k"},
		"wildcard inbox":         {InboxPrefix: "_INBOX.>"},
		"inbox with empty token": {InboxPrefix: "_INBOX..x"},
	} {
		require.ErrorIs(t, a.Validate(), op.ErrInvalid, name)
	}
	for name, a := range map[string]bus.Auth{
		"none":  {},
		"user":  {User: "u", PasswordFile: "/f"},
		"token": {TokenFile: "/f"},
		"tls":   {TLSCA: "/ca", TLSCert: "/c", TLSKey: "/k", InboxPrefix: "_INBOX_SVC.dispatcher"},
	} {
		require.NoError(t, a.Validate(), name)
	}
}

// Secret files are read at connect, one trailing line break dropped; a
// missing or empty file is an error that does not quote any content.
// Breaking it: reading the file with its newline (the server refuses the
// password) or accepting an empty one (connecting without a password).
func TestAuthOptionsReadSecretFiles(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	require.NoError(t, os.WriteFile(pw, []byte("s3cret\n"), 0o600))
	opts, err := bus.Auth{User: "u", PasswordFile: pw}.Options()
	require.NoError(t, err)
	require.Len(t, opts, 1)

	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	_, err = bus.Auth{TokenFile: empty}.Options()
	require.ErrorIs(t, err, op.ErrInvalid)
	_, err = bus.Auth{User: "u", PasswordFile: filepath.Join(dir, "missing")}.Options()
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = bus.Auth{TLSCA: pw}.Options()
	require.ErrorIs(t, err, op.ErrInvalid, "a CA file without a certificate")
}

// URLs are printed with user names but never passwords or tokens, in
// every form NATS_URL takes (a list, no scheme). Breaking it: a token-only
// URL (nats://TOKEN@host) printed as it is, since url.User has no password.
func TestRedactURL(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"nats://u:p4ss@h:4222":       "nats://u:***@h:4222",
		"nats://t0ken@h:4222":        "nats://***@h:4222",
		"tls://u:p@a:1,nats://t@b:2": "tls://u:***@a:1,nats://***@b:2",
		"nats://h:4222":              "nats://h:4222",
		"u:p4ss@h:4222":              "nats://u:***@h:4222",
		"nats://u:p%zz@h":            redact.Unparsable,
	} {
		got := bus.RedactURL(in)
		require.Equal(t, want, got, in)
		require.NotContains(t, got, "p4ss")
		require.NotContains(t, got, "t0ken")
	}
}
