// Package natsembed runs an in-process NATS server with JetStream enabled, for
// dev mode and tests. It listens on loopback and a random free port unless told
// otherwise, stays silent unless given a logger, and removes its temporary
// store directory on Shutdown.
package natsembed

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/pkg/op"
)

// Options configures Start. The zero value is a silent server on a random
// loopback port with a temporary store.
type Options struct {
	// Host to listen on; default 127.0.0.1.
	Host string
	// Port to listen on; 0 picks a free random port (never the NATS default 4222).
	Port int
	// StoreDir holds JetStream's files; "" means a temporary directory that
	// Shutdown removes. A directory given here is kept, so a server restarted
	// on it finds its streams again.
	StoreDir string
	// ReadyTimeout bounds the wait for the server to accept clients; default 10s.
	ReadyTimeout time.Duration
	// Logger receives the server's log lines; the zero value logs nothing.
	Logger zerolog.Logger
	// ConfigFile, when set, is a nats-server configuration file (such as
	// deploy/nats/nats.conf) whose accounts, users, permissions and TLS
	// the server runs with; includes are resolved relative to it. Host,
	// Port and StoreDir above still decide where it listens and stores
	// (its listen and store_dir settings are replaced), signals stay with
	// the embedding process, and JetStream is on.
	ConfigFile string
}

// Server is a running embedded NATS server.
type Server struct {
	ns       *server.Server
	storeDir string
	tempDir  string // removed on Shutdown; "" when the caller owns StoreDir
	once     sync.Once
}

// Start starts a NATS server with JetStream and waits until it accepts
// clients. Invalid options return an error wrapping op.ErrInvalid; a server
// that cannot start (port in use, unwritable store) returns an error saying why.
func Start(opts Options) (*Server, error) {
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("natsembed: port %d out of range: %w", opts.Port, op.ErrInvalid)
	}
	if opts.ReadyTimeout < 0 {
		return nil, fmt.Errorf("natsembed: negative ready timeout: %w", op.ErrInvalid)
	}
	host := opts.Host
	if host == "" {
		host = "127.0.0.1"
	}
	port := opts.Port
	if port == 0 {
		port = server.RANDOM_PORT // nats-server treats 0 as "use 4222"
	}
	ready := opts.ReadyTimeout
	if ready == 0 {
		ready = 10 * time.Second
	}

	s := &Server{storeDir: opts.StoreDir}
	if s.storeDir == "" {
		dir, err := os.MkdirTemp("", "natsembed-*")
		if err != nil {
			return nil, fmt.Errorf("natsembed: create store dir: %w", err)
		}
		s.storeDir, s.tempDir = dir, dir
	}

	sopts := &server.Options{}
	if opts.ConfigFile != "" {
		fopts, err := server.ProcessConfigFile(opts.ConfigFile)
		if err != nil {
			s.removeTemp()
			return nil, fmt.Errorf("natsembed: config file: %w", err)
		}
		sopts = fopts
	}
	sopts.Host, sopts.Port, sopts.JetStream, sopts.StoreDir = host, port, true, s.storeDir
	sopts.NoSigs = true // the embedding process owns signals
	// The file may name a monitoring port or cluster; an embedded server
	// for dev mode and tests serves clients only.
	sopts.HTTPPort, sopts.HTTPSPort, sopts.Cluster.Port, sopts.LeafNode.Port, sopts.Gateway.Port = 0, 0, 0, 0, 0
	ns, err := server.NewServer(sopts)
	if err != nil {
		s.removeTemp()
		return nil, fmt.Errorf("natsembed: configure server: %w", err)
	}
	logger := &natsLogger{log: opts.Logger}
	ns.SetLoggerV2(logger, false, false, false)
	s.ns = ns

	// Start runs synchronously up to the accept loop, so a failure to enable
	// JetStream or to listen has been reported to the logger when it returns.
	ns.Start()
	if msg := logger.fatal(); msg != "" {
		s.Shutdown()
		return nil, fmt.Errorf("natsembed: start server: %s", msg)
	}
	if !ns.ReadyForConnections(ready) {
		s.Shutdown()
		if msg := logger.fatal(); msg != "" {
			return nil, fmt.Errorf("natsembed: start server: %s", msg)
		}
		return nil, fmt.Errorf("natsembed: server not ready for connections after %s", ready)
	}
	if !ns.JetStreamEnabled() {
		s.Shutdown()
		return nil, errors.New("natsembed: server started without JetStream")
	}
	return s, nil
}

// URL is the client URL, e.g. nats://127.0.0.1:43121.
func (s *Server) URL() string { return s.ns.ClientURL() }

// StoreDir is the JetStream store directory in use (temporary or given).
func (s *Server) StoreDir() string { return s.storeDir }

// Shutdown stops the server, waits until it has stopped and removes the
// temporary store directory, if any. It is safe to call more than once.
func (s *Server) Shutdown() {
	s.once.Do(func() {
		if s.ns != nil {
			s.ns.Shutdown()
			s.ns.WaitForShutdown()
		}
		s.removeTemp()
	})
}

func (s *Server) removeTemp() {
	if s.tempDir != "" {
		_ = os.RemoveAll(s.tempDir) // best effort: a leftover temp dir harms nothing
	}
}

// natsLogger adapts nats-server's Logger to zerolog and remembers the first
// fatal message so Start can return it instead of the process exiting.
type natsLogger struct {
	log zerolog.Logger

	mu        sync.Mutex
	fatalText string
}

func (l *natsLogger) fatal() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fatalText
}

func (l *natsLogger) Noticef(format string, v ...any) { l.log.Info().Msgf(format, v...) }
func (l *natsLogger) Warnf(format string, v ...any)   { l.log.Warn().Msgf(format, v...) }
func (l *natsLogger) Errorf(format string, v ...any)  { l.log.Error().Msgf(format, v...) }
func (l *natsLogger) Debugf(format string, v ...any)  { l.log.Debug().Msgf(format, v...) }
func (l *natsLogger) Tracef(format string, v ...any)  { l.log.Trace().Msgf(format, v...) }

// Fatalf records the message; it never exits the process.
func (l *natsLogger) Fatalf(format string, v ...any) {
	msg := fmt.Sprintf(format, v...)
	l.mu.Lock()
	if l.fatalText == "" {
		l.fatalText = msg
	}
	l.mu.Unlock()
	l.log.Error().Msg(msg)
}
