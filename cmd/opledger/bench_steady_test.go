package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// A table of work in flight is judged by its total size: its size per live
// row rises whenever the backlog falls, which is no bloat; a total size
// that keeps growing is. A ledger table is judged per live row.
func TestSteadyVerdictJudgesQueueTablesByTotalSize(t *testing.T) {
	t.Parallel()
	const mb = 1 << 20
	report := func(leases func(i int) tableStat, ops func(i int) tableStat) *steadyReport {
		s := &steadyReport{Rate: 100}
		for i := range 9 {
			s.Intervals = append(s.Intervals, steadyInterval{HeapLiveBytes: 100 * mb, RSSBytes: 200 * mb,
				Tables: []tableStat{leases(i), ops(i)}})
		}
		return s
	}
	steadyOps := func(i int) tableStat {
		return tableStat{Table: "operations", LiveTuples: int64(100000 * (i + 1)), TotalBytes: int64(100000*(i+1)) * 1000}
	}
	judged := func(v steadyVerdict, table string) tableTrends {
		for _, tt := range v.Tables {
			if tt.Table == table {
				return tt
			}
		}
		t.Fatalf("no verdict for %s", table)
		return tableTrends{}
	}

	// The backlog falls from 3000 leases to 1000, the table's size holds.
	draining := verdict(report(func(i int) tableStat {
		return tableStat{Table: "entity_leases", LiveTuples: int64(3000 - 250*i), DeadTuples: 200000, TotalBytes: 45 * mb}
	}, steadyOps))
	require.True(t, draining.Flat, "%+v", draining)
	require.True(t, judged(draining, "entity_leases").Queue)

	// The same live rows, the size growing by half: bloat.
	bloating := verdict(report(func(i int) tableStat {
		return tableStat{Table: "entity_leases", LiveTuples: 2000, DeadTuples: 200000, TotalBytes: int64(40+5*i) * mb}
	}, steadyOps))
	require.False(t, bloating.Flat)
	require.Equal(t, []string{"entity_leases"}, bloating.NotFlat)

	// A ledger table whose rows grow faster than its live rows is not flat.
	growing := verdict(report(func(i int) tableStat {
		return tableStat{Table: "entity_leases", LiveTuples: 100, TotalBytes: mb}
	}, func(i int) tableStat {
		return tableStat{Table: "operations", LiveTuples: int64(100000 * (i + 1)), TotalBytes: int64(100000*(i+1)) * int64(1000+200*i)}
	}))
	require.Equal(t, []string{"operations"}, growing.NotFlat)
	require.False(t, judged(growing, "operations").Queue)
}
