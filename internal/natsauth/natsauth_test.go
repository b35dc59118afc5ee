package natsauth_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/opledger/opledger/internal/natsauth"
	"github.com/opledger/opledger/internal/pipetest"
)

// Every user of the shipped configuration gets a password; the server's
// file holds only hashes and the password files are out of other host
// users' reach. Breaking it: a user added to nats.conf in a form Users does
// not read (genpasswd would skip it and the server would refuse to start
// on an undefined variable), or plaintext in passwords.conf.
func TestWriteSecretsForTheShippedConfig(t *testing.T) {
	t.Parallel()
	conf, err := os.ReadFile(filepath.Join(pipetest.RepoRoot(t), "deploy", "nats", "nats.conf"))
	require.NoError(t, err)
	var names []string
	for _, u := range natsauth.Users(conf) {
		names = append(names, u.Name)
	}
	require.Equal(t, []string{"planner-ingest", "dispatcher", "reconciler", "compensator", "agent-acme", "agent-globex", "agent-default"}, names)

	dir := t.TempDir()
	secrets, err := natsauth.Write(dir, conf, bcrypt.MinCost, false)
	require.NoError(t, err)
	hashes, err := os.ReadFile(filepath.Join(dir, "passwords.conf"))
	require.NoError(t, err)
	for user, pw := range secrets {
		require.GreaterOrEqual(t, len(pw), 32, user)
		require.NotContains(t, string(hashes), pw, "passwords.conf holds hashes only")
		got, err := os.ReadFile(natsauth.PasswordFile(dir, user))
		require.NoError(t, err)
		require.Equal(t, pw+"\n", string(got))
	}
	// Again: passwords are kept, unless rotated.
	again, err := natsauth.Write(dir, conf, bcrypt.MinCost, false)
	require.NoError(t, err)
	require.Equal(t, secrets, again)
	rotated, err := natsauth.Write(dir, conf, bcrypt.MinCost, true)
	require.NoError(t, err)
	require.NotEqual(t, secrets["dispatcher"], rotated["dispatcher"])
	fi, err := os.Stat(filepath.Join(dir, "secrets"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), fi.Mode().Perm())
}
