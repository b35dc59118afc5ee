// Package mcpserver is opledger's MCP server (docs/mcp.md): an agent-side
// door where every tool of the registry is an MCP tool and every
// tools/call becomes an intent on the same NATS path every agent uses
// (internal/agentcall), so planner-ingest stays the only writer of
// operations. It serves get_operation and list_operations, scoped to the
// session's workflow, over the operators' API; asks for approvals with
// elicitation; and, as `opledger mcp proxy`, fronts an upstream MCP
// server whose side-effecting tools the registry puts behind the ledger.
//
// Identity comes from _meta under opledger's prefix (MetaConversationID,
// MetaToolCallID), never from the JSON-RPC id; the tenant only from the
// server's configuration. Whatever a client sends is hostile: ids are
// bounded, arguments go through the registry's strict canonicalization,
// and nothing a client says about a tool (hints, keys) is trusted.
package mcpserver

import (
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/rs/zerolog"

	"github.com/opledger/opledger/internal/agentcall"
	"github.com/opledger/opledger/internal/apiclient"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/client"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/registry"
	"github.com/opledger/opledger/pkg/wire"
)

// The _meta keys a client sets on tools/call, and the argument fallback
// for clients that cannot set _meta (Config.ArgumentFallback).
const (
	MetaPrefix         = "dev.opledger/"
	MetaConversationID = MetaPrefix + "conversation_id"
	MetaToolCallID     = MetaPrefix + "tool_call_id"
	MetaWorkflowID     = MetaPrefix + "workflow_id"
	MetaRunID          = MetaPrefix + "run_id"

	ArgConversationID = "_opledger_conversation_id"
	ArgToolCallID     = "_opledger_tool_call_id"
)

// The read tools every server offers (when Config.Reader is set).
const (
	ToolGetOperation   = "get_operation"
	ToolListOperations = "list_operations"
)

// Passthrough calls an upstream tool directly (a proxy's reads).
type Passthrough func(ctx context.Context, tool *registry.Tool, args json.RawMessage) (*mcp.CallToolResult, error)

// Config configures a server.
type Config struct {
	Door *agentcall.Door
	// Workflow is every call's workflow.
	Workflow string
	// WorkflowFromMeta lets a call name its workflow in _meta
	// (dev.opledger/workflow_id); off by default: the workflow also scopes
	// what list_operations shows.
	WorkflowFromMeta bool
	// ArgumentFallback accepts _opledger_conversation_id and
	// _opledger_tool_call_id as arguments, for clients that cannot set
	// _meta; off by default.
	ArgumentFallback bool
	// Reader reads operations through the operators' API (a viewer token):
	// get_operation and list_operations are offered only with it.
	Reader *apiclient.Client
	// APIURL is where approval links point (default Reader's URL).
	APIURL string
	// FormApprover, when set, lets a user confirm a call that needs
	// approval through a form elicitation; it records the confirmation as
	// its token's actor (an approver other than the server's actor). Nil:
	// approvals are asked for in URL mode only.
	FormApprover *apiclient.Client
	// Tools are the registry tools served (nil: all).
	Tools []string
	// Passthrough, when set, serves pure_read tools by calling it instead
	// of going through the ledger (the proxy).
	Passthrough Passthrough
	// Describe, when set, gives a tool's description (the proxy: the
	// upstream's when the registry has none).
	Describe func(*registry.Tool) string
	// StateKey signs the request state of approval elicitations (at least
	// 32 bytes). Without it a random key is made: a restarted server then
	// asks again rather than trust an answer it cannot verify.
	StateKey []byte
	Name     string
	Version  string
	Log      zerolog.Logger
}

type server struct {
	cfg      Config
	mcp      *mcp.Server
	stateKey []byte
}

// New builds the MCP server. Errors: no door, an invalid workflow.
func New(cfg Config) (*mcp.Server, error) {
	if cfg.Door == nil {
		return nil, fmt.Errorf("mcpserver: a door is required: %w", op.ErrInvalid)
	}
	if !wire.ValidWorkflowID(cfg.Workflow) {
		return nil, fmt.Errorf("mcpserver: workflow %q is not a valid workflow id: %w", wire.Clip(cfg.Workflow), op.ErrInvalid)
	}
	if cfg.APIURL == "" && cfg.Reader != nil {
		cfg.APIURL = cfg.Reader.URL()
	}
	cfg.APIURL = strings.TrimRight(cfg.APIURL, "/")
	if cfg.Name == "" {
		cfg.Name = "opledger"
	}
	if cfg.Version == "" {
		cfg.Version = "v1"
	}
	s := &server{cfg: cfg, stateKey: cfg.StateKey}
	if len(s.stateKey) == 0 {
		s.stateKey = make([]byte, 32)
		_, _ = rand.Read(s.stateKey) // crypto/rand.Read never fails
	} else if len(s.stateKey) < 32 {
		return nil, fmt.Errorf("mcpserver: the state key must be at least 32 bytes: %w", op.ErrInvalid)
	}
	s.mcp = mcp.NewServer(&mcp.Implementation{Name: cfg.Name, Version: cfg.Version}, &mcp.ServerOptions{
		Instructions: instructions, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{}}})
	reg := cfg.Door.Registry()
	names := cfg.Tools
	if names == nil {
		names = reg.Names()
	}
	for _, name := range names {
		t, err := reg.Tool(name)
		if err != nil {
			return nil, err
		}
		if name == ToolGetOperation || name == ToolListOperations {
			return nil, fmt.Errorf("mcpserver: registry tool %s would hide opledger's own: %w", name, op.ErrInvalid)
		}
		schema, ok := inputSchema(t.ArgsSchema, cfg.ArgumentFallback)
		if !ok {
			cfg.Log.Warn().Str("tool", name).Msg("mcp: args_schema is not an object schema; tool not served")
			continue
		}
		desc := t.Description
		if cfg.Describe != nil {
			desc = cfg.Describe(t)
		}
		mt := &mcp.Tool{Name: name, Description: describe(desc, t), InputSchema: schema, Annotations: Hints(t)}
		if cfg.Passthrough != nil && t.Class == op.ClassPureRead {
			s.mcp.AddTool(mt, s.passthrough(t))
			continue
		}
		mt.OutputSchema = OutputSchema()
		s.mcp.AddTool(mt, s.call(t))
	}
	if cfg.Reader != nil {
		s.addReadTools()
	}
	return s.mcp, nil
}

const instructions = `Every tool call here is recorded in opledger's ledger before it runs, and runs at most once per business identity: calling again with the same arguments never makes a second effect.
Set _meta "dev.opledger/tool_call_id" (your model's tool-call id) and "dev.opledger/conversation_id" on every tools/call, and keep them when you retry the same call.
Read structuredContent: status, retry_recommendation and next say what to do. unknown_outcome means "do not call again; follow the operation".`

func describe(desc string, t *registry.Tool) string {
	if desc == "" {
		desc = t.Intent
	}
	return desc + " [opledger: " + string(t.Class) + "; recorded before it runs, at most once per business identity]"
}

// Hints are the annotations of a tool served through the ledger, from the
// operator's registry alone (never an upstream's or a client's):
//
//   - readOnlyHint: pure_read;
//   - idempotentHint: repeating the call with the same arguments has no
//     further effect, which the ledger guarantees for every tool it
//     dedupes by a key derived from the arguments, except one whose key
//     carries {entity_version}: there, the same arguments after another
//     action on the entity are a new action (a set-back);
//   - destructiveHint: external_irreversible (set false otherwise, since
//     MCP's default is true);
//   - openWorldHint: everything but internal_write.
func Hints(t *registry.Tool) *mcp.ToolAnnotations {
	destructive := t.Class.Destructive()
	open := t.Class != op.ClassInternalWrite
	return &mcp.ToolAnnotations{Title: t.Name, ReadOnlyHint: t.Class.ReadOnly(), IdempotentHint: !t.KeyUsesEntityVersion(),
		DestructiveHint: &destructive, OpenWorldHint: &open}
}

// inputSchema is the tool's args_schema as MCP's inputSchema, with the
// fallback arguments when they are on.
func inputSchema(raw json.RawMessage, fallback bool) (map[string]any, bool) {
	var m map[string]any
	if json.Unmarshal(raw, &m) != nil || m["type"] != "object" {
		return nil, false
	}
	if fallback {
		props, _ := m["properties"].(map[string]any)
		if props == nil {
			props = map[string]any{}
		}
		props[ArgConversationID] = map[string]any{"type": "string", "description": "your conversation id (only if you cannot set _meta)"}
		props[ArgToolCallID] = map[string]any{"type": "string", "description": "your tool-call id (only if you cannot set _meta)"}
		m["properties"] = props
	}
	return m, true
}

// ids are a call's identity as the client gave it.
type ids struct {
	workflow, run, conversation, toolCall string
}

// identity reads _meta (and the fallback arguments), returning the
// arguments without the fallback fields. Errors: *agentcall.InvalidError.
func (s *server) identity(meta mcp.Meta, args json.RawMessage) (ids, json.RawMessage, error) {
	id := ids{workflow: s.cfg.Workflow}
	get := func(key string) (string, error) {
		v, ok := meta[key]
		if !ok || v == nil {
			return "", nil
		}
		str, ok := v.(string)
		if !ok {
			return "", &agentcall.InvalidError{Reason: fmt.Sprintf("_meta %q must be a string", key)}
		}
		return str, nil
	}
	var err error
	if id.conversation, err = get(MetaConversationID); err != nil {
		return id, nil, err
	}
	if id.toolCall, err = get(MetaToolCallID); err != nil {
		return id, nil, err
	}
	if id.run, err = get(MetaRunID); err != nil {
		return id, nil, err
	}
	if s.cfg.WorkflowFromMeta {
		wf, err := get(MetaWorkflowID)
		if err != nil {
			return id, nil, err
		}
		if wf != "" {
			id.workflow = wf
		}
	}
	if !s.cfg.ArgumentFallback || len(args) == 0 {
		return id, args, nil
	}
	if _, err := canon.NormalizeArgs(args); err != nil { // strict: no repeated keys before the map below
		return id, nil, &agentcall.InvalidError{Reason: "arguments: " + wire.Clip200(err.Error())}
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(args, &m); err != nil {
		return id, nil, &agentcall.InvalidError{Reason: "arguments must be a JSON object"}
	}
	for key, dst := range map[string]*string{ArgConversationID: &id.conversation, ArgToolCallID: &id.toolCall} {
		raw, ok := m[key]
		if !ok {
			continue
		}
		delete(m, key)
		var v string
		if err := json.Unmarshal(raw, &v); err != nil {
			return id, nil, &agentcall.InvalidError{Reason: key + " must be a string"}
		}
		if *dst == "" { // _meta wins
			*dst = v
		}
	}
	out, err := json.Marshal(m)
	if err != nil {
		return id, nil, err
	}
	return id, out, nil
}

// call is the handler of a ledger-backed tool.
func (s *server) call(t *registry.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		id, args, err := s.identity(req.Params.Meta, req.Params.Arguments)
		if err != nil {
			return s.refused(t.Name, id.workflow, err)
		}
		progress := s.progress(ctx, req)
		c := agentcall.Call{Tool: t.Name, Args: args, WorkflowID: id.workflow, RunID: id.run, ConversationID: id.conversation,
			ToolCallID: id.toolCall}
		if req.Extra != nil && req.Extra.TokenInfo != nil && req.Extra.TokenInfo.UserID != "" {
			c.ActorID = req.Extra.TokenInfo.UserID
		}
		log := s.cfg.Log.With().Str("tool", t.Name).Str("workflow_id", id.workflow).Logger()
		sub, err := s.cfg.Door.Submit(ctx, c, progress)
		var inv *agentcall.InvalidError
		switch {
		case errors.As(err, &inv):
			return s.refused(t.Name, id.workflow, err)
		case err != nil && ctx.Err() != nil:
			log.Info().Str("event_id", sub.EventID).Msg("mcp: caller went away; the operation goes on")
			return nil, err
		case err != nil:
			log.Warn().Err(err).Str("event_id", sub.EventID).Msg("mcp: call not submitted")
			return nil, fmt.Errorf("opledger could not submit the call (sending it again with the same tool-call id is safe): %w", err)
		}
		res := fromClient(sub.Result, sub.Answer, sub.ArgsHash, s.verify(sub.Result.OperationID))
		res.WaitEnded = sub.WaitEnded
		switch {
		case res.OperationID == "":
		case op.State(res.Status) == op.StateAwaitingApproval:
			var input *mcp.CallToolResult
			if res, input = s.approval(ctx, req, id, sub, res, progress); input != nil {
				log.Info().Str("event_id", sub.EventID).Str("operation_id", sub.Result.OperationID).Msg("mcp: approval asked for")
				return input, nil
			}
		default:
			// The client answers an approval question that a person
			// decided before the answer came back (the link was opened at
			// once): the result still says which approval it was.
			if st, ok := s.answered(req, sub.EventID, res.OperationID, sub.ArgsHash); ok {
				res.Approval = s.decided(ctx, req, res.OperationID, sub.ArgsHash, st)
			}
		}
		advise(res, s.cfg.Reader != nil, "call this tool again with the same arguments and the same tool-call id")
		log.Info().Str("event_id", sub.EventID).Str("operation_id", res.OperationID).Str("status", res.Status).
			Str("dedupe_decision", res.Decision).Dur("waited_ms", sub.Waited).Msg("mcp: tools/call answered")
		return render(res), nil
	}
}

// refused answers a call the door refused before sending anything.
func (s *server) refused(tool, workflow string, err error) (*mcp.CallToolResult, error) {
	var inv *agentcall.InvalidError
	if !errors.As(err, &inv) {
		return nil, err
	}
	res := agentcall.Refused(tool, workflow, "", inv)
	advise(res, false, "")
	return render(res), nil
}

// render turns a Result into the tool's answer: structured content, the
// safe user message, and a line with the receipt and what to do next.
func render(res *Result) *mcp.CallToolResult {
	line := res.Next
	if res.Receipt != nil {
		line = res.Receipt.Text + ". " + line
	}
	return &mcp.CallToolResult{StructuredContent: res, IsError: res.DefinitiveFailure(),
		Content: []mcp.Content{&mcp.TextContent{Text: res.SafeUserMessage}, &mcp.TextContent{Text: line}}}
}

func (s *server) verify(opID string) string {
	if opID == "" {
		return ""
	}
	v := "opledger ops show " + opID
	if s.cfg.APIURL != "" {
		v += " (or GET " + s.cfg.APIURL + "/v1/operations/" + opID + ")"
	}
	return v
}

// progress returns the callback that sends a progress notification per
// transition while a call waits, when the client asked for progress.
func (s *server) progress(ctx context.Context, req *mcp.CallToolRequest) func(client.Result) {
	tok := req.Params.GetProgressToken()
	if tok == nil {
		return nil
	}
	var mu sync.Mutex
	n := 0
	return func(r client.Result) {
		mu.Lock()
		n++
		p := float64(n)
		mu.Unlock()
		msg := fmt.Sprintf("%s: %s (%s)", r.OperationID, r.Status, r.SafeUserMessage)
		nctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_ = req.Session.NotifyProgress(nctx, &mcp.ProgressNotificationParams{ProgressToken: tok, Progress: p, Message: msg})
	}
}

// ElicitationID names an approval request: the operation and its
// arguments hash. The same call always gets the same one, across restarts.
func ElicitationID(opID, argsHash string) string { return agentcall.ApprovalID(opID, argsHash) }

// inputApproval is the key of the approval in a call's input requests.
const inputApproval = "opledger_approval"

// approval handles a call whose operation awaits approval, the way MCP
// defines asking a person for input: the result is input-required with an
// elicitation (the SDK sends it as elicitation/create to clients of older
// protocol versions) and a signed request state binding it to this call's
// event, the operation and its arguments hash; the client answers by
// calling again with the response and the state. Then, within the call's
// wait, it waits for the decision.
//
// URL mode points a person at the operation in the operators' API, where
// an approver decides with their own token: the link grants nothing. A
// form confirmation is offered only where the operator configured
// FormApprover: the user's "approve" is then recorded as that approver, an
// actor other than the proposing agent (the ledger refuses a proposer's
// vote). No tool approves anything. It returns either a result for the
// agent or an input-required result.
func (s *server) approval(ctx context.Context, req *mcp.CallToolRequest, id ids, sub agentcall.Submitted, res *Result,
	progress func(client.Result)) (*Result, *mcp.CallToolResult) {
	opID := res.OperationID
	a := &Approval{ElicitationID: ElicitationID(opID, sub.ArgsHash), ArgsHash: sub.ArgsHash, Elicited: "none"}
	if s.cfg.APIURL != "" {
		a.URL = s.cfg.APIURL + "/v1/operations/" + opID
	}
	res.Approval = a
	log := s.cfg.Log.With().Str("operation_id", opID).Str("elicitation_id", a.ElicitationID).Logger()

	st, answered := s.answered(req, sub.EventID, opID, sub.ArgsHash)
	if !answered {
		params := s.elicitation(req, a, res.Tool, opID, sub.ArgsHash)
		if params == nil {
			return res, nil // the client cannot be asked: the link in the result
		}
		state, err := s.signState(approvalState{EventID: sub.EventID, OperationID: opID, ArgsHash: sub.ArgsHash, Mode: params.Mode,
			Expires: time.Now().Add(stateTTL).Unix()})
		if err != nil {
			log.Error().Err(err).Msg("mcp: request state not signed")
			return res, nil
		}
		return nil, &mcp.CallToolResult{InputRequests: mcp.InputRequestMap{inputApproval: params}, RequestState: state}
	}
	er, _ := req.Params.InputResponses[inputApproval].(*mcp.ElicitResult)
	a.Elicited = st.Mode
	switch {
	case er == nil || er.Action != "accept":
		res.Reason = "the user did not go on in the client; the approval request stays open for an approver"
		return res, nil
	case st.Mode == "form":
		if yes, _ := er.Content["approve"].(bool); !yes || s.cfg.FormApprover == nil {
			res.Reason = "the user did not confirm in the client; the approval request stays open for an approver"
			return res, nil
		}
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
		_, err := s.cfg.FormApprover.Approve(actx, opID, sub.ArgsHash, "confirmed by the user in the MCP client ("+a.ElicitationID+")")
		cancel()
		if err != nil && !errors.Is(err, op.ErrConflict) { // a conflict: this confirmation was recorded before
			log.Warn().Err(err).Msg("mcp: form approval not recorded")
			res.Reason = "the confirmation could not be recorded: " + wire.Clip200(err.Error())
			return res, nil
		}
	}
	remaining := s.cfg.Door.Wait() - sub.Waited
	if remaining <= 0 {
		res.WaitEnded = true
		return res, nil
	}
	wctx, cancel := context.WithTimeout(ctx, remaining)
	defer cancel()
	notified := false
	cur, ended, err := s.cfg.Door.WaitFor(wctx, id.workflow, opID, func(r client.Result) bool {
		return r.Status != client.StatusAwaitingApproval && r.AtRest()
	}, func(r client.Result) {
		if progress != nil {
			progress(r)
		}
		if r.Status != client.StatusAwaitingApproval && st.Mode == "url" && !notified {
			notified = true
			_ = req.Session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: a.ElicitationID})
		}
	})
	if (err != nil && !errors.Is(err, context.DeadlineExceeded)) || cur.Version <= res.Version {
		res.WaitEnded = true
		return res, nil
	}
	next := fromClient(cur, sub.Answer, sub.ArgsHash, s.verify(opID))
	next.WaitEnded = ended
	next.Approval = a
	return next, nil
}

// decided is the approval of a call whose operation left
// awaiting_approval before the client's answer to the question came back;
// a URL elicitation is then complete, and the client is told so.
func (s *server) decided(ctx context.Context, req *mcp.CallToolRequest, opID, argsHash string, st approvalState) *Approval {
	a := &Approval{ElicitationID: ElicitationID(opID, argsHash), ArgsHash: argsHash, Elicited: st.Mode}
	if s.cfg.APIURL != "" {
		a.URL = s.cfg.APIURL + "/v1/operations/" + opID
	}
	if st.Mode == "url" {
		_ = req.Session.NotifyElicitationComplete(ctx, &mcp.ElicitationCompleteParams{ElicitationID: a.ElicitationID})
	}
	return a
}

// elicitation is what the client is asked, or nil when it cannot be asked
// (no elicitation capability, or URL mode only and no API URL).
func (s *server) elicitation(req *mcp.CallToolRequest, a *Approval, tool, opID, argsHash string) *mcp.ElicitParams {
	var caps *mcp.ElicitationCapabilities
	if ip := req.Session.InitializeParams(); ip != nil && ip.Capabilities != nil {
		caps = ip.Capabilities.Elicitation
	}
	if caps == nil {
		return nil
	}
	what := fmt.Sprintf("%s (operation %s, arguments sha256 %s…)", tool, opID, argsHash[:min(16, len(argsHash))])
	switch {
	case s.cfg.FormApprover != nil && (caps.Form != nil || caps.URL == nil):
		return &mcp.ElicitParams{Mode: "form", Message: "Approve " + what + "? It needs a person's approval before it runs.",
			RequestedSchema: map[string]any{"type": "object", "required": []string{"approve"}, "properties": map[string]any{
				"approve": map[string]any{"type": "boolean", "title": "Approve", "description": "Run this call once, with exactly these arguments"}}}}
	case a.URL != "" && caps.URL != nil:
		return &mcp.ElicitParams{Mode: "url", ElicitationID: a.ElicitationID, URL: a.URL,
			Message: what + " needs a person's approval before it runs. An approver opens the link with their opledger token."}
	}
	return nil
}

// answered returns the verified state of the call's approval elicitation
// when the call carries the client's answer to it.
func (s *server) answered(req *mcp.CallToolRequest, eventID, opID, argsHash string) (approvalState, bool) {
	if req.Params.RequestState == "" || req.Params.InputResponses[inputApproval] == nil {
		return approvalState{}, false
	}
	st, err := s.verifyState(req.Params.RequestState)
	if err != nil || st.EventID != eventID || st.OperationID != opID || st.ArgsHash != argsHash {
		// Forged, from another call, from before a key change, or expired:
		// ask again.
		return approvalState{}, false
	}
	return st, true
}

// passthrough serves a proxy's read: validated by the registry, then sent
// to the upstream as it is; nothing is recorded.
func (s *server) passthrough(t *registry.Tool) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		_, args, err := s.identity(req.Params.Meta, req.Params.Arguments)
		if err != nil {
			return s.refused(t.Name, s.cfg.Workflow, err)
		}
		if len(args) == 0 {
			args = json.RawMessage("{}")
		}
		prep, err := t.Prepare(registry.Proposal{WorkflowID: s.cfg.Workflow, Args: args})
		if err != nil {
			return s.refused(t.Name, s.cfg.Workflow, &agentcall.InvalidError{Reason: wire.Clip200(err.Error())})
		}
		return s.cfg.Passthrough(ctx, t, json.RawMessage(prep.Args.JSON))
	}
}

// strictArgs decodes a read tool's arguments: exact names from allowed,
// each once, nothing else.
func strictArgs(raw json.RawMessage, allowed ...string) (map[string]json.RawMessage, error) {
	if len(raw) == 0 {
		raw = json.RawMessage("{}")
	}
	if _, err := canon.NormalizeArgs(raw); err != nil {
		return nil, err
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, errors.New("arguments must be a JSON object")
	}
	for k := range m {
		if !slices.Contains(allowed, k) {
			return nil, fmt.Errorf("unknown argument %q (the arguments are %s)", wire.Clip(k), strings.Join(allowed, ", "))
		}
	}
	return m, nil
}
