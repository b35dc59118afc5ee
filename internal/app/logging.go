package app

import (
	"fmt"
	"io"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"
)

// Log formats accepted by NewLogger.
const (
	LogJSON    = "json"
	LogConsole = "console"
	// LogAuto is console on a terminal, JSON otherwise.
	LogAuto = "auto"
)

// NewLogger returns the process logger: lines at level and above, in format
// (json, console or auto), on w, each with a timestamp. StartServices adds
// service and instance to the loggers it hands each part of the process.
// Durations are logged in milliseconds, in fields whose names end in _ms.
func NewLogger(w io.Writer, level, format string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil || level == "" {
		return zerolog.Nop(), fmt.Errorf("unknown log level %q (use trace, debug, info, warn, error or disabled)", level)
	}
	switch format {
	case LogAuto:
		if isTerminal(w) {
			w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
		}
	case LogConsole:
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly, NoColor: !isTerminal(w)}
	case LogJSON:
	default:
		return zerolog.Nop(), fmt.Errorf("unknown log format %q (use json, console or auto)", format)
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger(), nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// hostname is the default instance name.
func hostname() string {
	h, err := os.Hostname()
	if err != nil || h == "" {
		return "opledger"
	}
	return h
}

// DefaultInstance names a process that was given no instance name: its host
// and process id, so that two processes on one host never share the names
// that fence their work (relay claims, attempt and leader rows).
func DefaultInstance() string {
	return hostname() + "-" + strconv.Itoa(os.Getpid())
}
