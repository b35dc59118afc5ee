// Package natsauth makes the secrets of opledger's NATS server
// configuration (deploy/nats/nats.conf): a password per user, the bcrypt
// hash the server checks it against, and the files each side reads. Its
// tests run a server with that very configuration and show every
// permission it grants and every one it refuses.
package natsauth

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"golang.org/x/crypto/bcrypt"
)

// User is one user of the configuration whose password is a variable.
type User struct {
	Name string // the NATS user name, e.g. planner-ingest
	Var  string // the variable holding its bcrypt hash, e.g. PW_PLANNER_INGEST
}

var userRE = regexp.MustCompile(`user:\s*"?([A-Za-z0-9_.-]+)"?\s*,\s*password:\s*\$([A-Z0-9_]+)`)

// Users lists the users of a configuration whose password is given as
// $VARIABLE, in the order they appear.
func Users(conf []byte) []User {
	var out []User
	for _, m := range userRE.FindAllSubmatch(conf, -1) {
		out = append(out, User{Name: string(m[1]), Var: string(m[2])})
	}
	return out
}

// Secrets are the passwords made for a configuration, by user name.
type Secrets map[string]string

// PasswordFile is where Write puts a user's password: dir/secrets/<user>.password.
func PasswordFile(dir, user string) string {
	return filepath.Join(dir, "secrets", user+".password")
}

// Write makes a random password for every user of the configuration
// conf that has none yet (rotate: for every user) and writes, under dir, passwords.conf (the variables conf
// includes, each a bcrypt hash of the given cost; mode 0600) and
// secrets/<user>.password (the password itself). The secrets directory
// is 0700, so only its owner on the host reaches the passwords; the files
// in it are 0644 because compose bind-mounts each one into a container
// whose process is another user (distroless nonroot), and the mount keeps
// the host's owner and mode. Existing files are replaced. cost is bcrypt's, between bcrypt.MinCost (tests)
// and bcrypt.MaxCost; 11 is nats-server's own default.
//
// A user whose password file exists keeps its password unless rotate is
// set, so adding a tenant to nats.conf and running it again changes
// nothing for the others (passwords.conf gets new salts, same passwords).
func Write(dir string, conf []byte, cost int, rotate bool) (Secrets, error) {
	users := Users(conf)
	if len(users) == 0 {
		return nil, fmt.Errorf("natsauth: the configuration has no user with a $VARIABLE password")
	}
	if err := os.MkdirAll(filepath.Join(dir, "secrets"), 0o700); err != nil {
		return nil, fmt.Errorf("natsauth: secrets dir: %w", err)
	}
	if err := os.Chmod(filepath.Join(dir, "secrets"), 0o700); err != nil {
		return nil, fmt.Errorf("natsauth: secrets dir: %w", err)
	}
	var b strings.Builder
	b.WriteString("# Written by deploy/nats/genpasswd: bcrypt hashes of the passwords in secrets/.\n# Do not commit.\n")
	secrets := Secrets{}
	for _, u := range users {
		pw := ""
		if !rotate {
			if old, err := os.ReadFile(PasswordFile(dir, u.Name)); err == nil {
				pw = strings.TrimRight(string(old), "\r\n")
			} else if !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("natsauth: password file for %s: %w", u.Name, err)
			}
		}
		if pw == "" {
			raw := make([]byte, 24)
			if _, err := rand.Read(raw); err != nil {
				return nil, fmt.Errorf("natsauth: random password: %w", err)
			}
			pw = base64.RawURLEncoding.EncodeToString(raw)
		}
		hash, err := bcrypt.GenerateFromPassword([]byte(pw), cost)
		if err != nil {
			return nil, fmt.Errorf("natsauth: bcrypt for %s: %w", u.Name, err)
		}
		fmt.Fprintf(&b, "%s: %q\n", u.Var, hash)
		if err := os.WriteFile(PasswordFile(dir, u.Name), []byte(pw+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("natsauth: password file for %s: %w", u.Name, err)
		}
		secrets[u.Name] = pw
	}
	if err := os.WriteFile(filepath.Join(dir, "passwords.conf"), []byte(b.String()), 0o600); err != nil {
		return nil, fmt.Errorf("natsauth: passwords.conf: %w", err)
	}
	return secrets, nil
}
