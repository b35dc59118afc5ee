package main

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/internal/testdb"
)

// An interval reports each pass it saw once, with the time the samples
// saw it, its last phase, and whether it was still running at the end;
// the next interval starts empty but for what still runs.
func TestMaintenanceLogSumsAnIntervalsSamples(t *testing.T) {
	t.Parallel()
	var l maintenanceLog
	p := 500 * time.Millisecond
	l.add([]progressRow{{"analyze", "attempts", "acquiring sample rows"}}, p)
	l.add([]progressRow{{"vacuum", "operations", "scanning heap"}}, p)
	l.add([]progressRow{{"vacuum", "operations", "vacuuming indexes"}, {"vacuum", "entity_leases", "scanning heap"}}, p)
	l.add([]progressRow{{"vacuum", "operations", "vacuuming indexes"}}, p)
	got, err := l.take()
	require.NoError(t, err)
	require.Equal(t, []maintenanceSeen{
		{Command: "analyze", Table: "attempts", Seconds: 0.5, Phase: "acquiring sample rows"},
		{Command: "vacuum", Table: "operations", Seconds: 1.5, Phase: "vacuuming indexes", Running: true},
		{Command: "vacuum", Table: "entity_leases", Seconds: 0.5, Phase: "scanning heap"},
	}, got)

	got, err = l.take()
	require.NoError(t, err)
	require.Empty(t, got, "nothing sampled since")

	l.add(nil, p)
	l.fail(errors.New("first"))
	l.fail(errors.New("second"))
	got, err = l.take()
	require.Empty(t, got)
	require.EqualError(t, err, "first")
	_, err = l.take()
	require.NoError(t, err, "an error belongs to its interval")

	var out bytes.Buffer
	printMaintenance(&out, "  ", []maintenanceSeen{{Command: "vacuum", Table: "operations", Seconds: 38, Phase: "vacuuming indexes", Running: true}}, "")
	require.Equal(t, "  vacuum and analyze seen: vacuum of operations 38.0 s (vacuuming indexes, still running)\n", out.String())
	out.Reset()
	printMaintenance(&out, "  ", nil, "")
	require.Empty(t, out.String(), "a quiet interval prints no line")
}

// The watch sees a real vacuum in progress: one slowed down with the cost
// delay, so that it lasts long enough to be sampled.
func TestMaintenanceWatchSeesAVacuumRunning(t *testing.T) {
	t.Parallel()
	url := testdb.New(t)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, url)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	_, err = conn.Exec(ctx, `CREATE TABLE slow_vacuum (id int, pad text);
		INSERT INTO slow_vacuum SELECT g, repeat('x', 200) FROM generate_series(1, 20000) g;
		DELETE FROM slow_vacuum WHERE id % 2 = 0`)
	require.NoError(t, err)

	var l maintenanceLog
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	require.NoError(t, watchMaintenance(watchCtx, url, &l))

	// Every page read costs at least 1, so at a limit of 1 and 20 ms a
	// pause the table's hundreds of pages take seconds.
	vacCtx, stopVacuum := context.WithCancel(ctx)
	done := make(chan error, 1)
	_, err = conn.Exec(ctx, `SET vacuum_cost_delay = '20ms'; SET vacuum_cost_limit = 1`)
	require.NoError(t, err)
	go func() {
		_, err := conn.Exec(vacCtx, `VACUUM slow_vacuum`) // alone: VACUUM cannot run in a transaction
		done <- err
	}()
	var seen []maintenanceSeen
	require.Eventually(t, func() bool {
		got, err := l.take()
		require.NoError(t, err)
		seen = append(seen, got...)
		for _, m := range got {
			if m.Command == "vacuum" && m.Table == "slow_vacuum" && m.Running && m.Seconds > 0 && m.Phase != "" {
				return true
			}
		}
		return false
	}, 30*time.Second, 700*time.Millisecond, "seen: %+v", seen)
	stopVacuum()
	require.Error(t, <-done, "the vacuum was cancelled, not finished: it was still running when seen")
}
