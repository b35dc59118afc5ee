package bus

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"strings"

	"github.com/nats-io/nats.go"

	"github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/pkg/op"
)

// Auth is how a service authenticates to NATS and secures the connection.
// At most one kind of credential is set: User and Password, Token, an nkey
// seed, or a creds file (a user JWT with its seed). Secrets are best given
// as files (PasswordFile, TokenFile, NkeySeedFile, CredsFile), which are
// read when the connection is made and never logged. The zero value
// connects without credentials and without TLS, as before Auth existed.
type Auth struct {
	User         string
	Password     string
	PasswordFile string
	Token        string
	TokenFile    string
	// NkeySeedFile is a file holding the nkey seed (SU...) of the user.
	NkeySeedFile string
	// CredsFile is a NATS creds file (a user JWT and its nkey seed), for
	// servers run in operator mode.
	CredsFile string

	// TLSCA is a PEM file of the CAs that sign the server's certificate.
	TLSCA string
	// TLSCert and TLSKey are the client certificate and its key, for servers
	// that verify clients (verify: true) or map certificates to users.
	TLSCert string
	TLSKey  string
	// TLSRequire refuses to talk to the server without TLS. Any TLS file
	// implies it; so does a tls:// URL.
	TLSRequire bool

	// InboxPrefix replaces _INBOX as the prefix of the connection's reply
	// subjects (JetStream acknowledgements, pulled messages, API answers),
	// so that the server can allow each user exactly its own inbox, e.g.
	// _INBOX_SVC.dispatcher (docs/security.md).
	InboxPrefix string
}

// Kind names the credential Auth carries, for logs: "none", "user",
// "token", "nkey" or "creds". It never includes a secret.
func (a Auth) Kind() string {
	switch {
	case a.CredsFile != "":
		return "creds"
	case a.NkeySeedFile != "":
		return "nkey"
	case a.Token != "" || a.TokenFile != "":
		return "token"
	case a.User != "":
		return "user"
	default:
		return "none"
	}
}

// TLS reports whether the connection is to use TLS.
func (a Auth) TLS() bool {
	return a.TLSRequire || a.TLSCA != "" || a.TLSCert != "" || a.TLSKey != ""
}

// Validate reports a misconfiguration (two kinds of credential, a user
// without a password, a certificate without its key, a bad inbox prefix)
// as an error wrapping op.ErrInvalid. It does not read the files.
func (a Auth) Validate() error {
	kinds := 0
	if a.User != "" || a.Password != "" || a.PasswordFile != "" {
		kinds++
		switch {
		case a.User == "":
			return fmt.Errorf("bus: nats password without a user: %w", op.ErrInvalid)
		case a.Password == "" && a.PasswordFile == "":
			return fmt.Errorf("bus: nats user %q without a password (or password file): %w", a.User, op.ErrInvalid)
		case a.Password != "" && a.PasswordFile != "":
			return fmt.Errorf("bus: nats password given both inline and as a file: %w", op.ErrInvalid)
		}
	}
	if a.Token != "" || a.TokenFile != "" {
		kinds++
		if a.Token != "" && a.TokenFile != "" {
			return fmt.Errorf("bus: nats token given both inline and as a file: %w", op.ErrInvalid)
		}
	}
	if a.NkeySeedFile != "" {
		kinds++
	}
	if a.CredsFile != "" {
		kinds++
	}
	if kinds > 1 {
		return fmt.Errorf("bus: more than one kind of nats credential (user/password, token, nkey, creds): %w", op.ErrInvalid)
	}
	if (a.TLSCert == "") != (a.TLSKey == "") {
		return fmt.Errorf("bus: nats TLS client certificate and key go together: %w", op.ErrInvalid)
	}
	if a.InboxPrefix != "" {
		if strings.ContainsAny(a.InboxPrefix, "*> \t\r\n") || strings.HasPrefix(a.InboxPrefix, ".") ||
			strings.HasSuffix(a.InboxPrefix, ".") || strings.Contains(a.InboxPrefix, "..") {
			return fmt.Errorf("bus: nats inbox prefix %q: want subject tokens without wildcards: %w", a.InboxPrefix, op.ErrInvalid)
		}
	}
	return nil
}

// readSecret reads a secret file, dropping one trailing line break.
func readSecret(kind, path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		// The path is configuration, not a secret; the content never appears.
		return "", fmt.Errorf("bus: read nats %s file: %w", kind, err)
	}
	s := strings.TrimRight(string(b), "\r\n")
	if s == "" {
		return "", fmt.Errorf("bus: nats %s file %s is empty: %w", kind, path, op.ErrInvalid)
	}
	return s, nil
}

// Options turns a into nats.go connection options, reading the secret
// files. Errors wrap op.ErrInvalid for a misconfiguration, or the file
// system's error; none contains a secret.
func (a Auth) Options() ([]nats.Option, error) {
	if err := a.Validate(); err != nil {
		return nil, err
	}
	var opts []nats.Option
	switch a.Kind() {
	case "user":
		pw := a.Password
		if a.PasswordFile != "" {
			var err error
			if pw, err = readSecret("password", a.PasswordFile); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.UserInfo(a.User, pw))
	case "token":
		tok := a.Token
		if a.TokenFile != "" {
			var err error
			if tok, err = readSecret("token", a.TokenFile); err != nil {
				return nil, err
			}
		}
		opts = append(opts, nats.Token(tok))
	case "nkey":
		o, err := nats.NkeyOptionFromSeed(a.NkeySeedFile)
		if err != nil {
			return nil, fmt.Errorf("bus: nats nkey seed file: %w", err)
		}
		opts = append(opts, o)
	case "creds":
		if _, err := os.Stat(a.CredsFile); err != nil {
			return nil, fmt.Errorf("bus: nats creds file: %w", err)
		}
		opts = append(opts, nats.UserCredentials(a.CredsFile))
	}
	if a.TLS() {
		cfg := &tls.Config{MinVersion: tls.VersionTLS12}
		if a.TLSCA != "" {
			pem, err := os.ReadFile(a.TLSCA)
			if err != nil {
				return nil, fmt.Errorf("bus: nats TLS CA: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("bus: nats TLS CA %s holds no PEM certificate: %w", a.TLSCA, op.ErrInvalid)
			}
			cfg.RootCAs = pool
		}
		if a.TLSCert != "" {
			cert, err := tls.LoadX509KeyPair(a.TLSCert, a.TLSKey)
			if err != nil {
				return nil, fmt.Errorf("bus: nats TLS client certificate: %w", err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		opts = append(opts, nats.Secure(cfg))
	}
	if a.InboxPrefix != "" {
		opts = append(opts, nats.CustomInboxPrefix(a.InboxPrefix))
	}
	return opts, nil
}

// RedactURL renders a NATS URL, or a comma-separated list of them, without
// secrets: nats://user:***@host:4222 for a user and password, and
// nats://***@host:4222 for a token (see internal/redact). Something that
// does not parse as a URL is replaced as a whole, since it may hold a
// secret anywhere.
func RedactURL(raw string) string { return redact.URL(raw) }
