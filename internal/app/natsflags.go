package app

import (
	"flag"

	"github.com/opledger/opledger/internal/bus"
)

// NATSAuthFlags registers the NATS credential and TLS flags on fs, each
// defaulting to its OPLEDGER_NATS_* environment variable, and returns the
// Auth they fill in once fs is parsed. Secrets are best given as files
// (-nats-password-file, -nats-token-file, -nats-nkey-seed, -nats-creds): a
// value on the command line shows in the process list. Validate the result
// with Auth.Validate after parsing.
func NATSAuthFlags(fs *flag.FlagSet, env func(key, def string) string) *bus.Auth {
	a := &bus.Auth{}
	fs.StringVar(&a.User, "nats-user", env("OPLEDGER_NATS_USER", ""), "NATS user [OPLEDGER_NATS_USER]")
	fs.StringVar(&a.Password, "nats-password", env("OPLEDGER_NATS_PASSWORD", ""), "NATS password; prefer -nats-password-file [OPLEDGER_NATS_PASSWORD]")
	fs.StringVar(&a.PasswordFile, "nats-password-file", env("OPLEDGER_NATS_PASSWORD_FILE", ""), "file holding the NATS password [OPLEDGER_NATS_PASSWORD_FILE]")
	fs.StringVar(&a.Token, "nats-token", env("OPLEDGER_NATS_TOKEN", ""), "NATS token; prefer -nats-token-file [OPLEDGER_NATS_TOKEN]")
	fs.StringVar(&a.TokenFile, "nats-token-file", env("OPLEDGER_NATS_TOKEN_FILE", ""), "file holding the NATS token [OPLEDGER_NATS_TOKEN_FILE]")
	fs.StringVar(&a.NkeySeedFile, "nats-nkey-seed", env("OPLEDGER_NATS_NKEY_SEED", ""), "file holding the NATS user's nkey seed [OPLEDGER_NATS_NKEY_SEED]")
	fs.StringVar(&a.CredsFile, "nats-creds", env("OPLEDGER_NATS_CREDS", ""), "NATS creds file (user JWT and seed) [OPLEDGER_NATS_CREDS]")
	fs.StringVar(&a.TLSCA, "nats-tls-ca", env("OPLEDGER_NATS_TLS_CA", ""), "PEM file of the CAs of the NATS server's certificate [OPLEDGER_NATS_TLS_CA]")
	fs.StringVar(&a.TLSCert, "nats-tls-cert", env("OPLEDGER_NATS_TLS_CERT", ""), "client certificate for NATS (PEM) [OPLEDGER_NATS_TLS_CERT]")
	fs.StringVar(&a.TLSKey, "nats-tls-key", env("OPLEDGER_NATS_TLS_KEY", ""), "key of the client certificate (PEM) [OPLEDGER_NATS_TLS_KEY]")
	fs.BoolVar(&a.TLSRequire, "nats-tls", env("OPLEDGER_NATS_TLS", "") == "true", "require TLS to NATS (implied by any -nats-tls-* file or a tls:// URL) [OPLEDGER_NATS_TLS=true]")
	fs.StringVar(&a.InboxPrefix, "nats-inbox-prefix", env("OPLEDGER_NATS_INBOX_PREFIX", ""), "prefix of the connection's reply subjects (default _INBOX_SVC.<service>) [OPLEDGER_NATS_INBOX_PREFIX]")
	return a
}

// ServiceInboxPrefix is the reply-subject prefix of a service's NATS
// connections unless configured otherwise: _INBOX_SVC.<service>. The
// upper-case token cannot be a tenant's (_INBOX_<tenant> is lower-case),
// and deploy/nats/nats.conf allows each service exactly its own.
func ServiceInboxPrefix(service string) string { return "_INBOX_SVC." + service }
