package store

import (
	"context"
	"fmt"
	"time"

	"github.com/opledger/opledger/db/dbsqlc"
)

// Lookups is what the ledger counted of an ambiguous outcome's current
// episode: every lookup that settled nothing, and those of them that
// failed (a lookup error, an effect still pending, a verdict that could not
// be written), which the tool's max_lookups bounds.
type Lookups struct {
	Failures, Lookups int
	// Moved is true when the operation has moved past the version the
	// caller holds (a newer episode counted already): nothing was recorded.
	Moved bool
}

// NoteLookup records, in the ledger, a lookup of operation id at version
// (the operation's version while it waits) that settled nothing; failed
// counts it against max_lookups. next is when the command is due again:
// until that has passed by the re-drive's delay, the re-drive leaves the
// waiting command alone. The counts survive a command written again, whose
// JetStream delivery count starts from one.
func (s *Store) NoteLookup(ctx context.Context, id string, version int64, failed bool, next time.Duration) (Lookups, error) {
	row, err := s.q.ReconcileLookupNote(ctx, dbsqlc.ReconcileLookupNoteParams{
		OperationID: id, Version: version, Failed: failed, NextSeconds: max(next, 0).Seconds(), Now: s.now(),
	})
	if err != nil {
		err = translate(err)
		if isNotFound(err) {
			return Lookups{Moved: true}, nil
		}
		return Lookups{}, fmt.Errorf("note lookup of operation %s: %w", id, err)
	}
	return Lookups{Failures: int(row.Failures), Lookups: int(row.Lookups)}, nil
}

// DeleteDoneLookups deletes up to limit lookup counters of episodes that are
// over and unchanged for olderThan. It returns how many it deleted.
func (s *Store) DeleteDoneLookups(ctx context.Context, olderThan time.Duration, limit int) (int64, error) {
	n, err := s.q.ReconcileLookupDeleteDone(ctx, dbsqlc.ReconcileLookupDeleteDoneParams{
		OlderThanSeconds: olderThan.Seconds(), MaxRows: int32(limit), Now: s.now(),
	})
	if err != nil {
		return 0, fmt.Errorf("retention: lookups: %w", translate(err))
	}
	return n, nil
}
