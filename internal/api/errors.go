package api

import (
	"errors"
	"net/http"

	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/pkg/op"
)

// Errors of the HTTP layer itself, classified by the same table as the
// human loop's.
var (
	// errUnauthenticated: no bearer token, a malformed one, or one that is
	// not in the tokens file.
	errUnauthenticated = errors.New("a valid bearer token is required")
	// errTooLarge: the request body exceeds maxBody.
	errTooLarge = errors.New("request body too large")
	// errNoTokens: the process serves the API without a tokens file, so
	// nobody can be authenticated.
	errNoTokens = errors.New("no API tokens configured")
)

// Error codes, the "code" of every error body.
const (
	CodeInvalid         = "invalid"
	CodeUnauthenticated = "unauthenticated"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeConflict        = "conflict"
	CodeState           = "invalid_state"
	CodeTooLarge        = "too_large"
	CodeUnavailable     = "unavailable"
	CodeInternal        = "internal"
)

// classes is the one table from errors to statuses: the first row whose
// sentinel the error matches (errors.Is) decides. An error matching none is
// a 500 whose message says nothing about it (it is logged instead).
var classes = []struct {
	err    error
	status int
	code   string
}{
	{errUnauthenticated, http.StatusUnauthorized, CodeUnauthenticated},
	{errNoTokens, http.StatusServiceUnavailable, CodeUnavailable},
	{errTooLarge, http.StatusRequestEntityTooLarge, CodeTooLarge},
	{ops.ErrForbidden, http.StatusForbidden, CodeForbidden},
	{op.ErrNotFound, http.StatusNotFound, CodeNotFound},
	{ops.ErrState, http.StatusConflict, CodeState},
	{op.ErrStale, http.StatusConflict, CodeState},
	{op.ErrIllegalTransition, http.StatusConflict, CodeState},
	{op.ErrConflict, http.StatusConflict, CodeConflict},
	{op.ErrInvalid, http.StatusBadRequest, CodeInvalid},
	{op.ErrRetryable, http.StatusServiceUnavailable, CodeUnavailable},
}

// classify returns the status, code and message of err. Only classified
// errors show their text: they are written for people and hold nothing
// secret (ids, states, hashes, the reason a request was refused).
func classify(err error) (status int, code, message string) {
	for _, c := range classes {
		if errors.Is(err, c.err) {
			return c.status, c.code, err.Error()
		}
	}
	return http.StatusInternalServerError, CodeInternal, "internal error; the server's log has the details"
}

// Refusal reasons of opledger_api_refused_total besides the error codes:
// the finer causes of an invalid request (the intent routes' are in
// intentbody.go; ReasonInvalidQuery serves both).
const (
	ReasonInvalidBody = "invalid_body" // a write's body is not read strictly as its fields
	ReasonUnknownID   = "unknown_id"   // the path's id is not one an operation can have
)

// refusalReason is the stable reason a refused request is counted by: the
// finer one the error carries (withReason), else its error code.
func refusalReason(err error, code string) string {
	var r *reasonError
	if errors.As(err, &r) {
		return r.reason
	}
	return code
}

// ErrorBody is every error response: {"error": {"code", "message"}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail says what went wrong.
type ErrorDetail struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	// Reason is a stable cause, for programs, on the intent routes'
	// refusals of a body or query (intentbody.go).
	Reason string `json:"reason,omitempty"`
}
