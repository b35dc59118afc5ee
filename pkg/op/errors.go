package op

import (
	"errors"
	"strconv"
)

// Sentinel errors. Packages wrap them with context; callers test with errors.Is.
var (
	// ErrNotFound: the operation, event or row asked for does not exist.
	ErrNotFound = errors.New("not found")
	// ErrIllegalTransition: the state machine does not allow the event in the
	// state. Returned as *TransitionError.
	ErrIllegalTransition = errors.New("illegal transition")
	// ErrStale: a conditional write found another state or lease epoch than it
	// expected; another worker got there first. Returned as *StaleError.
	ErrStale = errors.New("stale write")
	// ErrConflict: a uniqueness rule was violated (same key, other arguments).
	ErrConflict = errors.New("conflict")
	// ErrInvalid: input failed validation. Typed errors carry the field.
	ErrInvalid = errors.New("invalid")
	// ErrRetryable: a transient infrastructure failure (serialization failure,
	// deadlock, connection loss); the whole unit of work may be retried.
	ErrRetryable = errors.New("retryable")
)

// StaleError says what a conditional write expected and what it found.
type StaleError struct {
	OperationID string
	WantState   State
	WantEpoch   int64
	GotState    State
	GotEpoch    int64
}

func (e *StaleError) Error() string {
	return "operation " + e.OperationID + ": expected state " + string(e.WantState) +
		" epoch " + strconv.FormatInt(e.WantEpoch, 10) + ", found " + string(e.GotState) + " epoch " + strconv.FormatInt(e.GotEpoch, 10)
}

// Unwrap makes errors.Is(err, ErrStale) true.
func (e *StaleError) Unwrap() error { return ErrStale }
