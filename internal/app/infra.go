package app

import (
	"context"
	"fmt"
	"maps"
	"path/filepath"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/bus"
	"github.com/opledger/opledger/internal/natsembed"
	"github.com/opledger/opledger/internal/pglocal"
	redactpkg "github.com/opledger/opledger/internal/redact"
	"github.com/opledger/opledger/schema"
)

// InfraConfig says where Postgres and NATS are, or where to start them.
type InfraConfig struct {
	// DatabaseURL, when set, is used as is; otherwise a private Postgres
	// cluster is started under DataDir/postgres (unix socket only).
	DatabaseURL string
	// NATSURL, when set, is used as is; otherwise an embedded NATS server
	// with JetStream is started on a free port, storing under DataDir/nats.
	NATSURL string
	// NATSAuth authenticates the connection that sets up the streams on a
	// NATS server given by NATSURL.
	NATSAuth bus.Auth
	// DataDir keeps the private cluster's and embedded server's data across
	// restarts; "" uses temporary directories removed on Close.
	DataDir string
	// Durable keeps Postgres's fsync on for a private cluster (dev mode);
	// tests and benchmarks of the pipeline may turn it off.
	Durable bool
	// MemoryStreams stores JetStream streams in memory (tests, benchmarks).
	MemoryStreams bool
	// RoleUsers, with a private cluster, creates a login user per service
	// and part (opledger_dev_<part>, a member of its role in DBRoles only)
	// and returns their connection strings in Infra.DatabaseURLs, so that
	// dev mode runs every part with only its grants. Ignored with a
	// DatabaseURL: the services then log in as its user.
	RoleUsers bool
	// PGSettings are extra server settings for a private cluster (-c
	// name=value, e.g. shared_preload_libraries for the bench's
	// pg_stat_statements); ignored with a DatabaseURL.
	PGSettings map[string]string
	Log        zerolog.Logger
}

// Infra is running infrastructure.
type Infra struct {
	DatabaseURL string
	// DatabaseURLs are the login users per service and part that
	// InfraConfig.RoleUsers made (nil otherwise), for ServicesConfig.
	DatabaseURLs map[string]string
	NATSURL      string
	// Where says, for people, where each part is.
	Where []string
	pg    *pglocal.Cluster
	nats  *natsembed.Server
}

// privateClusterSettings are the server settings a private cluster starts
// with (besides max_connections), before Infra.PGSettings.
var privateClusterSettings = map[string]string{
	"shared_buffers":     "1GB",
	"max_wal_size":       "4GB",
	"checkpoint_timeout": "15min",
}

// StartInfra connects to or starts Postgres and NATS, applies migrations and
// ensures the streams.
func StartInfra(ctx context.Context, cfg InfraConfig) (_ *Infra, err error) {
	in := &Infra{DatabaseURL: cfg.DatabaseURL, NATSURL: cfg.NATSURL}
	defer func() {
		if err != nil {
			in.Close()
		}
	}()
	if in.DatabaseURL == "" {
		dir := ""
		if cfg.DataDir != "" {
			dir = filepath.Join(cfg.DataDir, "postgres")
		}
		settings := map[string]string{"max_connections": "300"}
		// A ledger outgrows Postgres's stock 128 MB of shared buffers within
		// minutes at a few thousand operations a second; then the backends
		// write dirty buffers out themselves, and checkpoints every 1 GB of
		// WAL add full-page images. A steady bench run at 2,300 ops/s fell
		// behind after seven minutes on the stock settings and kept up for all
		// 10 with these (docs/architecture.md). -pg and PGSettings override.
		maps.Copy(settings, privateClusterSettings)
		maps.Copy(settings, cfg.PGSettings)
		in.pg, err = pglocal.Start(ctx, pglocal.Options{Dir: dir, Durable: cfg.Durable,
			ExtraSettings: settings,
			Logf:          func(f string, a ...any) { cfg.Log.Debug().Msgf(f, a...) }})
		if err != nil {
			return nil, fmt.Errorf("start private postgres (set DATABASE_URL to use a running server): %w", err)
		}
		in.DatabaseURL = in.pg.ConnString("postgres")
		in.Where = append(in.Where, "postgres: private cluster on a unix socket only, no TCP port (data in "+in.pg.Dir()+"): psql \""+in.DatabaseURL+"\"")
	} else {
		in.Where = append(in.Where, "postgres: "+redact(in.DatabaseURL))
	}
	if err := Migrate(ctx, in.DatabaseURL, cfg.Log); err != nil {
		return nil, err
	}
	if in.pg != nil && cfg.RoleUsers {
		if in.DatabaseURLs, err = roleUsers(ctx, in.DatabaseURL); err != nil {
			return nil, err
		}
		in.Where = append(in.Where, "postgres: each service logs in as opledger_dev_<service>, a member of its role only (docs/security.md)")
	}
	if in.NATSURL == "" {
		dir := ""
		if cfg.DataDir != "" {
			dir = filepath.Join(cfg.DataDir, "nats")
		}
		in.nats, err = natsembed.Start(natsembed.Options{StoreDir: dir})
		if err != nil {
			return nil, fmt.Errorf("start embedded nats (set NATS_URL to use a running server): %w", err)
		}
		in.NATSURL = in.nats.URL()
		in.Where = append(in.Where, "nats: embedded JetStream at "+in.NATSURL)
	} else {
		in.Where = append(in.Where, "nats: "+redact(in.NATSURL))
	}
	b, err := bus.ConnectAuth(ctx, in.NATSURL, "opledger-setup", cfg.NATSAuth, cfg.Log)
	if err != nil {
		return nil, err
	}
	defer b.Close()
	if err := b.EnsureStreams(ctx, bus.StreamOptions{Memory: cfg.MemoryStreams}); err != nil {
		return nil, err
	}
	return in, nil
}

// Close stops what StartInfra started.
func (in *Infra) Close() {
	if in.nats != nil {
		in.nats.Shutdown()
	}
	if in.pg != nil {
		_ = in.pg.Stop()
	}
}

// Migrate applies the embedded migrations to the database at url.
func Migrate(ctx context.Context, url string, log zerolog.Logger) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("migrate: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	applied, err := schema.Migrate(ctx, conn)
	if err != nil {
		return err
	}
	if len(applied) > 0 {
		log.Info().Strs("applied", applied).Msg("migrations applied")
	}
	return nil
}

// roleUsers creates, if absent, a login user per service and part in its
// role, on the private cluster at url (trust authentication on its socket,
// so no passwords), and returns their connection strings.
func roleUsers(ctx context.Context, url string) (map[string]string, error) {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return nil, fmt.Errorf("create login users: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	urls := map[string]string{}
	for part, role := range DBRoles {
		user := "opledger_dev_" + strings.ReplaceAll(part, "-", "_")
		var exists bool
		if err := conn.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1)`, user).Scan(&exists); err != nil {
			return nil, fmt.Errorf("create login user %s: %w", user, err)
		}
		if !exists {
			if _, err := conn.Exec(ctx, "CREATE ROLE "+pgx.Identifier{user}.Sanitize()+" LOGIN INHERIT IN ROLE "+pgx.Identifier{role}.Sanitize()); err != nil {
				return nil, fmt.Errorf("create login user %s: %w", user, err)
			}
		}
		urls[part] = url + " user=" + user // keyword/value: the last user wins
	}
	return urls, nil
}

// redact drops every credential from a connection string before it is
// printed (internal/redact).
func redact(s string) string { return redactpkg.URL(s) }
