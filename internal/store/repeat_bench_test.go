package store_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/internal/testdb"
	"github.com/opledger/opledger/pkg/op"
)

// BenchmarkSubmitRepeat is the store's part of a duplicate intent's
// answer: Store.Submit of a simple intent whose key the ledger has, under
// a new event id (duplicate_operation) or under the first one's event id
// (duplicate_event), one at a time, with its answer written; and, to
// compare, of new intents (new). With
// DATABASE_URL set to a server with fsync on, it includes the commit's
// flush.
func BenchmarkSubmitRepeat(b *testing.B) {
	ctx := context.Background()
	st, err := store.Open(ctx, testdb.New(b), store.Options{MaxConns: 4})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(st.Close)
	first := answering(submission("evt_first", newOp("key_first", "args")), 0)
	if res, err := st.Submit(ctx, first); err != nil || res.Decision != op.DecisionNew {
		b.Fatalf("first: %v %v", res, err)
	}
	for _, c := range []struct {
		name string
		want op.Decision
		sub  func(i int) store.Submission
	}{
		{"new", op.DecisionNew, func(i int) store.Submission {
			return answering(submission(fmt.Sprintf("evt_new_%d", i), newOp(fmt.Sprintf("key_new_%d", i), "args")), i+1)
		}},
		{"duplicate_operation", op.DecisionDuplicateOperation, func(i int) store.Submission {
			return answering(submission(fmt.Sprintf("evt_again_%d", i), newOp("key_first", "args")), i+1)
		}},
		{"duplicate_event", op.DecisionDuplicateEvent, func(i int) store.Submission {
			return answering(submission("evt_first", newOp("key_first", "args")), i+1)
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				res, err := st.Submit(ctx, c.sub(i))
				if err != nil || res.Decision != c.want {
					b.Fatalf("%d: %v %v", i, res, err)
				}
				i++
			}
		})
	}
}
