// Package policy applies the registry's rules beyond the idempotency key to
// a new operation, against the ledger: state guards (no second refund of a
// refunded charge, no refunds above the captured amount). The store runs
// them inside the submitting transaction, under a lock on the operation's
// entity, so two intents on one entity are judged one after the other.
package policy

import (
	"context"
	"fmt"
	"strconv"

	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
)

// Guard returns the store.Submission guard of tool, or nil when it has none.
func Guard(reg *registry.Registry, tool *registry.Tool) func(context.Context, *store.Tx, *op.Operation) (string, error) {
	if len(tool.Guards) == 0 {
		return nil
	}
	return func(ctx context.Context, tx *store.Tx, o *op.Operation) (string, error) {
		mine, err := tx.OperationsByEntity(ctx, o.Tenant, o.EntityType, o.EntityID)
		if err != nil {
			return "", err
		}
		for _, g := range tool.Guards {
			scope, scopeValue := o.EntityType+" "+o.EntityID, o.EntityID
			if g.Scope != "" {
				v, ok := argField(o, g.Scope)
				if !ok {
					return "", fmt.Errorf("operation has no %s", g.Scope)
				}
				scope, scopeValue = g.Scope+" "+v, v
			}
			var counted []*op.Operation
			for _, other := range mine {
				if other.Tool != tool.Name || !mayHaveEffect(other) || other.IdempotencyKey == o.IdempotencyKey {
					continue
				}
				if v, _ := argField(other, g.Scope); g.Scope != "" && v != scopeValue {
					continue
				}
				counted = append(counted, other)
			}
			var reason string
			var err error
			switch g.Kind {
			case registry.GuardOncePerEntity:
				if len(counted) > 0 {
					reason = fmt.Sprintf("refused by a state guard: %s already has %s operation %s (%s); only one is allowed",
						scope, tool.Name, counted[0].ID, counted[0].State)
				}
			case registry.GuardTotalAtMost:
				reason, err = totalAtMost(ctx, tx, g, o, scope, scopeValue, counted)
			}
			if err != nil || reason != "" {
				return reason, err
			}
		}
		return "", nil
	}
}

// mayHaveEffect reports whether an operation counts toward a guard: it is
// in flight or done, not one that ended without any effect.
func mayHaveEffect(o *op.Operation) bool {
	switch o.State {
	case op.StateRejected, op.StateCancelled:
		return false
	case op.StateFailedPermanent:
		return o.LastErrorCategory != op.CategoryRetriesExhausted && o.LastErrorCategory != "vendor_failed" &&
			o.LastErrorCategory != "client_error"
	}
	return true
}

func totalAtMost(ctx context.Context, tx *store.Tx, g registry.Guard, o *op.Operation, scope, scopeValue string, counted []*op.Operation) (string, error) {
	total, err := intArg(o, g.Field)
	if err != nil {
		return "", err
	}
	for _, other := range counted {
		n, err := intArg(other, g.Field)
		if err != nil {
			return "", err
		}
		total += n
	}
	limitOps, err := tx.OperationsByExternalObject(ctx, o.Tenant, g.LimitTool, scopeValue)
	if err != nil {
		return "", err
	}
	for _, lo := range limitOps {
		// The limit is a completed operation's, or, for a compensation, the
		// one it compensates, whatever is known of its outcome (a capture
		// given up on may have charged: its refund is capped at it).
		if lo.State != op.StateCompletedSuccess && lo.State != op.StateCompensating && lo.State != op.StateCompletedNoop &&
			lo.ID != o.CompensatesID {
			continue
		}
		limit, err := intArg(lo, g.LimitField)
		if err != nil {
			return "", err
		}
		if total > limit {
			return fmt.Sprintf("refused by a state guard: %s would bring the total %s on %s to %d, above the %d of %s operation %s",
				o.Tool, g.Field, scope, total, limit, g.LimitTool, lo.ID), nil
		}
		return "", nil
	}
	return fmt.Sprintf("refused by a state guard: no completed %s operation made %s, so there is no limit to check %s against",
		g.LimitTool, scope, g.Field), nil
}

// intArg reads an integer argument from an operation's canonical args.
func intArg(o *op.Operation, field string) (int64, error) {
	v, ok := argField(o, field)
	if !ok {
		return 0, fmt.Errorf("operation %s has no %s", o.ID, field)
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("operation %s: %s is not an integer", o.ID, field)
	}
	return n, nil
}

func argField(o *op.Operation, field string) (string, bool) {
	args, err := canonArgs(o)
	if err != nil {
		return "", false
	}
	return args.Field(field)
}

// canonArgs reads an operation's canonical arguments back.
func canonArgs(o *op.Operation) (*canon.Args, error) { return canon.NormalizeArgs(o.Args) }
