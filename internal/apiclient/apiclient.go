// Package apiclient is a small client of the operators' HTTP API
// (internal/api, docs/openapi.yaml) for opledger's own agent-side doors:
// the MCP server reads operations through it (get_operation,
// list_operations) and, where the operator allows form approvals, records
// a user's confirmation as an approver. It never logs or returns the token.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/pkg/op"
)

// maxAnswer bounds an answer read from the API.
const maxAnswer = 4 << 20

// Client talks to the API at URL with a bearer token.
type Client struct {
	url   string
	token string
	http  *http.Client
}

// New returns a client. base is the API's base URL (http or https); token
// is the bearer token. Errors: a URL that is not http(s), an empty token.
func New(base, token string, hc *http.Client) (*Client, error) {
	u, err := url.Parse(base)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("apiclient: the API URL must be an http or https URL: %w", op.ErrInvalid)
	}
	if token == "" {
		return nil, fmt.Errorf("apiclient: a token is required: %w", op.ErrInvalid)
	}
	if hc == nil {
		hc = &http.Client{Timeout: 15 * time.Second}
	}
	return &Client{url: strings.TrimRight(base, "/"), token: token, http: hc}, nil
}

// URL is the API's base URL.
func (c *Client) URL() string { return c.url }

// Error is an answer other than 200: the API's error code and message.
type Error struct {
	Status  int
	Code    string
	Message string
}

func (e *Error) Error() string {
	return fmt.Sprintf("api answered %d %s: %s", e.Status, e.Code, e.Message)
}

// Unwrap maps the API's codes to the domain's sentinels.
func (e *Error) Unwrap() error {
	switch e.Code {
	case api.CodeNotFound:
		return op.ErrNotFound
	case api.CodeConflict:
		return op.ErrConflict
	case api.CodeInvalid:
		return op.ErrInvalid
	case api.CodeForbidden:
		return ops.ErrForbidden
	case api.CodeState:
		return ops.ErrState
	}
	return nil
}

// Show returns an operation with its history, attempts and approval.
// Errors: op.ErrNotFound, *Error.
func (c *Client) Show(ctx context.Context, id string) (*ops.Detail, error) {
	var d ops.Detail
	if err := c.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), nil, &d); err != nil {
		return nil, err
	}
	if d.Operation == nil {
		return nil, errors.New("apiclient: the answer has no operation")
	}
	return &d, nil
}

// List returns a workflow's operations, the most recently changed first.
func (c *Client) List(ctx context.Context, workflowID string, limit int) ([]*op.Operation, error) {
	q := url.Values{"workflow_id": {workflowID}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var l api.ListResponse
	if err := c.do(ctx, http.MethodGet, "/v1/operations?"+q.Encode(), nil, &l); err != nil {
		return nil, err
	}
	return l.Operations, nil
}

// Approve votes for operation id, bound to argsHash, as the token's actor.
func (c *Client) Approve(ctx context.Context, id, argsHash, reason string) (*op.Operation, error) {
	var w api.WriteResponse
	if err := c.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/approve",
		map[string]string{"args_hash": argsHash, "reason": reason}, &w); err != nil {
		return nil, err
	}
	return w.Operation, nil
}

func (c *Client) do(ctx context.Context, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.url+path, rd)
	if err != nil {
		return fmt.Errorf("apiclient: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("apiclient: %s %s: %w", method, strings.SplitN(path, "?", 2)[0], err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer+1))
	if err != nil {
		return fmt.Errorf("apiclient: read answer: %w", err)
	}
	if len(data) > maxAnswer {
		return fmt.Errorf("apiclient: answer over %d bytes", maxAnswer)
	}
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		_ = json.Unmarshal(data, &eb)
		return &Error{Status: resp.StatusCode, Code: eb.Error.Code, Message: clip(eb.Error.Message)}
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("apiclient: answer is not the expected JSON: %w", err)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 300 {
		return strings.ToValidUTF8(s[:300], "") + "…"
	}
	return s
}
