package op_test

import (
	"testing"

	"github.com/opledger/opledger/pkg/op"
)

// The MCP hints are derived from the class, written out here by hand: a
// class that changed its hints (a destructive tool advertised as read-only
// to an MCP client) must be changed twice, here on purpose.
func TestSideEffectClassHints(t *testing.T) {
	t.Parallel()
	type hints struct{ readOnly, idempotent, destructive, external bool }
	want := map[op.SideEffectClass]hints{
		op.ClassPureRead:              {readOnly: true, idempotent: true},
		op.ClassInternalWrite:         {idempotent: true},
		op.ClassExternalIdempotent:    {idempotent: true, external: true},
		op.ClassExternalNonIdempotent: {external: true},
		op.ClassExternalIrreversible:  {destructive: true, external: true},
	}
	if len(want) != len(op.Classes) {
		t.Fatalf("the table covers %d classes, op.Classes has %d", len(want), len(op.Classes))
	}
	for _, c := range op.Classes {
		w, ok := want[c]
		if !ok {
			t.Fatalf("class %s is not in the table", c)
		}
		got := hints{c.ReadOnly(), c.Idempotent(), c.Destructive(), c.External()}
		if got != w {
			t.Errorf("%s: hints %+v, want %+v", c, got, w)
		}
		if !c.Valid() {
			t.Errorf("%s is not Valid", c)
		}
	}
	if op.SideEffectClass("read_only").Valid() {
		t.Error("an unknown class is Valid")
	}
}
