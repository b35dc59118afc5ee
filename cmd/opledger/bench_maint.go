package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// maintenancePeriod is how often a steady run looks at Postgres's progress
// views. A pass shorter than that may go unseen; the ones that stall a run
// last tens of seconds.
const maintenancePeriod = 500 * time.Millisecond

// maintenanceSeen is a vacuum or an analyze of one table that a steady
// interval saw running: about how long (the samples that saw it, times the
// period), the phase it was in when last seen, and whether it was still
// running when the interval ended. A stall that coincides with autovacuum's
// pass over a big table is then in the report rather than inferred from
// the server's log, which names a pass only once it has ended.
type maintenanceSeen struct {
	Command string  `json:"command"` // vacuum or analyze
	Table   string  `json:"table"`
	Seconds float64 `json:"seconds"`
	Phase   string  `json:"phase"`
	Running bool    `json:"running"`
}

// progressRow is one row of pg_stat_progress_vacuum or
// pg_stat_progress_analyze.
type progressRow struct {
	Command, Table, Phase string
}

// maintenanceLog gathers the samples of one interval.
type maintenanceLog struct {
	mu   sync.Mutex
	seen []maintenanceSeen // in the order first seen; Running: in the newest sample
	err  error
}

// add records one sample taken period after the one before.
func (l *maintenanceLog) add(rows []progressRow, period time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := range l.seen {
		l.seen[i].Running = false
	}
	for _, r := range rows {
		i := slices.IndexFunc(l.seen, func(m maintenanceSeen) bool { return m.Command == r.Command && m.Table == r.Table })
		if i < 0 {
			l.seen = append(l.seen, maintenanceSeen{Command: r.Command, Table: r.Table})
			i = len(l.seen) - 1
		}
		l.seen[i].Seconds += period.Seconds()
		l.seen[i].Phase = r.Phase
		l.seen[i].Running = true
	}
}

// fail keeps the first sampling error: the report says the views could not
// be read rather than that nothing ran.
func (l *maintenanceLog) fail(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err == nil {
		l.err = err
	}
}

// take returns what the interval saw and starts the next one.
func (l *maintenanceLog) take() ([]maintenanceSeen, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	out, err := l.seen, l.err
	l.seen, l.err = nil, nil
	return out, err
}

// maintenanceQuery reads what vacuums and analyzes run in the bench's
// database. Without pg_read_all_stats (a DATABASE_URL role that is not a
// superuser) another role's rows, autovacuum's among them, come without
// their table and are left out.
const maintenanceQuery = benchTag + `
	SELECT 'vacuum', c.relname, p.phase FROM pg_stat_progress_vacuum p JOIN pg_class c ON c.oid = p.relid
	WHERE p.datname = current_database()
	UNION ALL
	SELECT 'analyze', c.relname, p.phase FROM pg_stat_progress_analyze p JOIN pg_class c ON c.oid = p.relid
	WHERE p.datname = current_database()`

// watchMaintenance samples the progress views on a connection of its own
// until ctx ends.
func watchMaintenance(ctx context.Context, url string, l *maintenanceLog) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("bench: maintenance watch: %w", err)
	}
	go func() {
		defer conn.Close(context.WithoutCancel(ctx))
		t := time.NewTicker(maintenancePeriod)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			rows, err := conn.Query(ctx, maintenanceQuery)
			if err == nil {
				var got []progressRow
				if got, err = pgx.CollectRows(rows, pgx.RowToStructByPos[progressRow]); err == nil {
					l.add(got, maintenancePeriod)
					continue
				}
			}
			if ctx.Err() != nil {
				return
			}
			l.fail(err)
		}
	}()
	return nil
}

func printMaintenance(w io.Writer, indent string, seen []maintenanceSeen, errText string) {
	var parts []string
	for _, m := range seen {
		state := m.Phase
		if m.Running {
			state += ", still running"
		}
		parts = append(parts, fmt.Sprintf("%s of %s %.1f s (%s)", m.Command, m.Table, m.Seconds, state))
	}
	if errText != "" {
		parts = append(parts, "progress views unreadable: "+errText)
	}
	if len(parts) > 0 {
		fmt.Fprintf(w, "%svacuum and analyze seen: %s\n", indent, strings.Join(parts, "; "))
	}
}
