package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
	"github.com/opledger/opledger/internal/store"
	"github.com/opledger/opledger/pkg/op"
	"github.com/opledger/opledger/pkg/wire"
)

const opsUsage = `usage: opledger ops <command> [flags] [ID]

The human loop, as a client of the operators' HTTP API (docs/openapi.yaml):

  list                      operations, most recently changed first
                            [-state S] [-tool T] [-workflow W] [-older-than 15m] [-limit N]
  show ID                   an operation, its timeline, attempts, approval and audit trail
  approve ID -reason R      approve the arguments shown (or -args-hash H, the hash you were shown)
  deny ID -reason R         refuse it: nothing is sent
  resolve ID -verdict applied|not_applied|give_up [-object-id X] -reason R
                            settle an escalated operation with your evidence
  cancel ID -reason R       withdraw an operation that was not sent
  compensate ID -reason R   run the tool's compensation playbook (a new operation)
  webhooks                  webhook evidence, by default what was flagged for a person
                            (out of band, contradicting, expired) [-status S] [-provider P] [-limit N]
  parked [-limit N]         outbox messages NATS refused until they were parked
  requeue ID -reason R      publish a parked message again (its outbox row id)

Every command takes -api URL (default $OPLEDGER_API_URL, else http://127.0.0.1:8480),
-token (default $OPLEDGER_API_TOKEN; prefer the variable: flags show in process lists),
-json (print the API's JSON) and -timeout. Exit status: 0 done, 1 refused or failed
(the reason on stderr), 2 bad command line.
`

// runOps is "opledger ops".
func runOps(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, opsUsage)
		return errUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, opsUsage)
		return flag.ErrHelp
	}
	cmds := map[string]func(context.Context, *opsCmd, []string) error{
		"list": opsList, "show": opsShow, "approve": opsApprove, "deny": opsDeny,
		"resolve": opsResolve, "cancel": opsCancel, "compensate": opsCompensate, "webhooks": opsWebhooks,
		"parked": opsParked, "requeue": opsRequeue,
	}
	fn, ok := cmds[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "opledger ops: unknown command %q\n\n%s", args[0], opsUsage)
		return errUsage
	}
	c := &opsCmd{name: args[0], stdout: stdout, stderr: stderr}
	c.fs = flag.NewFlagSet("opledger ops "+args[0], flag.ContinueOnError)
	c.fs.SetOutput(stderr)
	def := getenv(env, "OPLEDGER_API_URL")
	if def == "" {
		def = "http://127.0.0.1:8480"
	}
	c.fs.StringVar(&c.api, "api", def, "base URL of the API [OPLEDGER_API_URL]")
	c.fs.StringVar(&c.token, "token", getenv(env, "OPLEDGER_API_TOKEN"), "bearer token (default $OPLEDGER_API_TOKEN)")
	c.fs.BoolVar(&c.json, "json", false, "print the API's JSON answer")
	c.fs.DurationVar(&c.timeout, "timeout", 30*time.Second, "how long to wait for the API")
	return fn(ctx, c, args[1:])
}

// opsCmd is one ops command: its flags and the API it talks to.
type opsCmd struct {
	name           string
	fs             *flag.FlagSet
	api, token     string
	json           bool
	timeout        time.Duration
	stdout, stderr io.Writer
}

// parse parses flags before and after one operation id (want: 1) or none.
func (c *opsCmd) parse(args []string, want int) (string, error) {
	if err := c.fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return "", err
		}
		return "", errUsage
	}
	id := ""
	if want == 1 {
		if c.fs.NArg() == 0 {
			fmt.Fprintf(c.stderr, "opledger ops %s: the id is missing\n", c.name)
			return "", errUsage
		}
		id = c.fs.Arg(0)
		if err := c.fs.Parse(c.fs.Args()[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return "", err
			}
			return "", errUsage
		}
	}
	if c.fs.NArg() > 0 {
		fmt.Fprintf(c.stderr, "opledger ops %s: unexpected argument %q\n", c.name, c.fs.Arg(0))
		return "", errUsage
	}
	u, err := url.Parse(c.api)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		fmt.Fprintf(c.stderr, "opledger ops %s: -api must be an http or https URL, got %q\n", c.name, c.api)
		return "", errUsage
	}
	if c.token == "" {
		fmt.Fprintf(c.stderr, "opledger ops %s: set OPLEDGER_API_TOKEN or pass -token (opledger dev prints one; opledger token makes one)\n", c.name)
		return "", errUsage
	}
	if u.Scheme == "http" && !loopback(u.Hostname()) {
		fmt.Fprintf(c.stderr, "warning: sending your token unencrypted to %s; put the API behind TLS\n", u.Host)
	}
	return id, nil
}

// reason adds the -reason flag that every write requires.
func (c *opsCmd) reason() *string {
	return c.fs.String("reason", "", "why (required; 1-500 characters, kept in the audit trail and told to the agent)")
}

func (c *opsCmd) needReason(r string) error {
	if strings.TrimSpace(r) == "" {
		fmt.Fprintf(c.stderr, "opledger ops %s: -reason is required\n", c.name)
		return errUsage
	}
	return nil
}

// apiError is an error answer of the API.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("%s (%d %s)", e.message, e.status, e.code)
}

// do sends one request and decodes a 200 answer into out, also returning
// its bytes; any other answer is an *apiError.
func (c *opsCmd) do(ctx context.Context, method, path string, body, out any) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.api, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("the API at %s did not answer: %w", c.api, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return nil, fmt.Errorf("read the API's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		var eb api.ErrorBody
		if wire.ReadJSON(data, &eb) != nil || eb.Error.Code == "" {
			return nil, &apiError{status: resp.StatusCode, code: "http", message: "the API answered " + resp.Status}
		}
		return nil, &apiError{status: resp.StatusCode, code: clean(eb.Error.Code), message: clean(eb.Error.Message)}
	}
	if out != nil {
		// Read as the API reads what it is sent: exact field names, none
		// twice, UTF-8; fields a newer API added are ignored.
		if err := wire.ReadJSON(data, out); err != nil {
			return nil, fmt.Errorf("the API's answer is not what this CLI expects: %w", err)
		}
	}
	return data, nil
}

// printJSON writes the API's answer as it came.
func (c *opsCmd) printJSON(data []byte) error {
	_, err := c.stdout.Write(data)
	return err
}

func opsList(ctx context.Context, c *opsCmd, args []string) error {
	state := c.fs.String("state", "", "only operations in this state")
	tool := c.fs.String("tool", "", "only this tool")
	workflow := c.fs.String("workflow", "", "only this workflow id")
	older := c.fs.Duration("older-than", 0, "only operations unchanged for at least this long (e.g. 15m)")
	limit := c.fs.Int("limit", 0, "at most this many (default 100, at most 1000)")
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"state": *state, "tool": *tool, "workflow_id": *workflow} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *older > 0 {
		q.Set("older_than", older.String())
	}
	if *limit != 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	path := "/v1/operations"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var res api.ListResponse
	data, err := c.do(ctx, http.MethodGet, path, nil, &res)
	if err != nil {
		return fmt.Errorf("list: %w", err)
	}
	if c.json {
		return c.printJSON(data)
	}
	if len(res.Operations) == 0 {
		fmt.Fprintln(c.stdout, "no operations")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTOOL\tSTATE\tAGE\tWORKFLOW\tKEY")
	now := time.Now()
	for _, o := range res.Operations {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", clean(o.ID), clean(o.Tool), clean(string(o.State)),
			age(now.Sub(o.UpdatedAt)), clean(o.WorkflowID), clean(o.IdempotencyKey))
	}
	return tw.Flush()
}

func opsWebhooks(ctx context.Context, c *opsCmd, args []string) error {
	status := c.fs.String("status", "", "flagged (the default), all, or one status: held, applied, confirmed, out_of_band, contradiction, expired")
	provider := c.fs.String("provider", "", "only this provider")
	limit := c.fs.Int("limit", 0, "at most this many (default 100, at most 1000)")
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	q := url.Values{}
	for k, v := range map[string]string{"status": *status, "provider": *provider} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if *limit != 0 {
		q.Set("limit", strconv.Itoa(*limit))
	}
	path := "/v1/webhooks"
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	var res api.WebhooksResponse
	data, err := c.do(ctx, http.MethodGet, path, nil, &res)
	if err != nil {
		return fmt.Errorf("webhooks: %w", err)
	}
	if c.json {
		return c.printJSON(data)
	}
	if len(res.Webhooks) == 0 {
		fmt.Fprintln(c.stdout, "no webhook evidence")
		return nil
	}
	printEvidence(c.stdout, res.Webhooks, true)
	return nil
}

// printEvidence prints webhook evidence as a table; withOperation adds the
// operation it was found to be about.
func printEvidence(w io.Writer, list []*store.Evidence, withOperation bool) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	head := "RECEIVED\tPROVIDER\tDELIVERY\tEVENT\tSTATUS\tOBJECT\tREASON"
	if withOperation {
		head = "RECEIVED\tPROVIDER\tDELIVERY\tEVENT\tSTATUS\tOPERATION\tMATCH\tOBJECT\tREASON"
	}
	fmt.Fprintln(tw, head)
	for _, e := range list {
		if withOperation {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(e.ReceivedAt), clean(e.Provider), clean(e.DeliveryID),
				clean(e.EventType), clean(e.Status), clean(e.OperationID), clean(e.MatchBy+"="+e.MatchValue), clean(e.ExternalObjectID), clean(e.Reason))
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", stamp(e.ReceivedAt), clean(e.Provider), clean(e.DeliveryID),
			clean(e.EventType), clean(e.Status), clean(e.ExternalObjectID), clean(e.Reason))
	}
	_ = tw.Flush()
}

func opsShow(ctx context.Context, c *opsCmd, args []string) error {
	id, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	d, data, err := c.detail(ctx, id)
	if err != nil {
		return fmt.Errorf("show %s: %w", id, err)
	}
	if c.json {
		return c.printJSON(data)
	}
	printDetail(c.stdout, d)
	return nil
}

func (c *opsCmd) detail(ctx context.Context, id string) (*ops.Detail, []byte, error) {
	var d ops.Detail
	data, err := c.do(ctx, http.MethodGet, "/v1/operations/"+url.PathEscape(id), nil, &d)
	if err != nil {
		return nil, nil, err
	}
	if d.Operation == nil {
		return nil, nil, errors.New("the API's answer has no operation")
	}
	return &d, data, nil
}

func opsApprove(ctx context.Context, c *opsCmd, args []string) error {
	reason := c.reason()
	hash := c.fs.String("args-hash", "", "the args_hash you were shown (default: fetch the operation, print its arguments and hash, and approve exactly those)")
	id, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	if err := c.needReason(*reason); err != nil {
		return err
	}
	if *hash == "" {
		// Show the approver what they approve, then approve exactly the hash
		// shown: should the operation hold other arguments by the time the
		// approval arrives, the API refuses it (409) instead of approving them.
		d, _, err := c.detail(ctx, id)
		if err != nil {
			return fmt.Errorf("approve %s: %w", id, err)
		}
		o := d.Operation
		args, ok := canonicalArgs(o)
		if len(o.RedactedArgs) > 0 {
			// Sensitive values are not shown, so the hash cannot be checked
			// here; the API still binds the approval to it.
			args += "  (sensitive, shown as ***: " + strings.Join(o.RedactedArgs, ", ") + ")"
		} else if !ok {
			return fmt.Errorf("approve %s: the arguments the API shows do not hash to their args_hash %s; not approving", id, clean(o.ArgsHash))
		}
		w := c.out()
		fmt.Fprintf(w, "approving %s: %s (%s), %s\n", clean(o.ID), clean(o.Tool), clean(string(o.Class)), clean(string(o.State)))
		fmt.Fprintf(w, "  arguments  %s\n", clean(args))
		fmt.Fprintf(w, "  args_hash  %s\n", clean(o.ArgsHash))
		if o.ProposedBy != "" {
			fmt.Fprintf(w, "  proposed   by %s\n", clean(o.ProposedBy))
		}
		if a := d.Approval; a != nil {
			fmt.Fprintf(w, "  approvals  %s\n", approvalLine(a))
		}
		*hash = o.ArgsHash
	} else {
		fmt.Fprintf(c.out(), "approving %s with args_hash %s\n", clean(id), clean(*hash))
	}
	var res api.WriteResponse
	data, err := c.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/approve",
		map[string]string{"args_hash": *hash, "reason": *reason}, &res)
	if err != nil {
		return fmt.Errorf("approve %s: %w", id, err)
	}
	if c.json {
		return c.printJSON(data)
	}
	switch {
	case res.Operation.State == op.StateAwaitingApproval && res.Approval != nil:
		fmt.Fprintf(c.stdout, "approved %s; still awaiting approval: %s\n", clean(id), approvalLine(res.Approval))
	default:
		fmt.Fprintf(c.stdout, "approved %s: %s\n", clean(id), clean(string(res.Operation.State)))
	}
	return nil
}

// out is where approve prints what is approved: stdout, or stderr under
// -json so that stdout stays one JSON document.
func (c *opsCmd) out() io.Writer {
	if c.json {
		return c.stderr
	}
	return c.stdout
}

func opsDeny(ctx context.Context, c *opsCmd, args []string) error {
	return c.write(ctx, args, "deny", "denied", nil)
}

func opsCancel(ctx context.Context, c *opsCmd, args []string) error {
	return c.write(ctx, args, "cancel", "cancelled", nil)
}

func opsResolve(ctx context.Context, c *opsCmd, args []string) error {
	verdict := c.fs.String("verdict", "", "applied (the vendor did it; give -object-id), not_applied (send it again under the same key) or give_up")
	objectID := c.fs.String("object-id", "", "the vendor's object id (with -verdict applied)")
	return c.write(ctx, args, "resolve", "resolved", func() (map[string]string, error) {
		switch ops.Verdict(*verdict) {
		case ops.VerdictApplied, ops.VerdictNotApplied, ops.VerdictGiveUp:
		default:
			fmt.Fprintf(c.stderr, "opledger ops resolve: -verdict must be applied, not_applied or give_up\n")
			return nil, errUsage
		}
		b := map[string]string{"verdict": *verdict}
		if *objectID != "" {
			b["external_object_id"] = *objectID
		}
		return b, nil
	})
}

// write runs deny, cancel or resolve: a reason, perhaps more fields.
func (c *opsCmd) write(ctx context.Context, args []string, action, done string, fields func() (map[string]string, error)) error {
	reason := c.reason()
	id, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	if err := c.needReason(*reason); err != nil {
		return err
	}
	body := map[string]string{}
	if fields != nil {
		if body, err = fields(); err != nil {
			return err
		}
	}
	body["reason"] = *reason
	var res api.WriteResponse
	data, err := c.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/"+action, body, &res)
	if err != nil {
		return fmt.Errorf("%s %s: %w", action, id, err)
	}
	if c.json {
		return c.printJSON(data)
	}
	fmt.Fprintf(c.stdout, "%s %s: %s\n", done, clean(id), clean(string(res.Operation.State)))
	return nil
}

func opsCompensate(ctx context.Context, c *opsCmd, args []string) error {
	reason := c.reason()
	id, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	if err := c.needReason(*reason); err != nil {
		return err
	}
	var res api.CompensateResponse
	data, err := c.do(ctx, http.MethodPost, "/v1/operations/"+url.PathEscape(id)+"/compensate", map[string]string{"reason": *reason}, &res)
	if err != nil {
		return fmt.Errorf("compensate %s: %w", id, err)
	}
	if c.json {
		return c.printJSON(data)
	}
	comp := res.Compensation
	if comp == nil {
		return errors.New("compensate: the API's answer has no compensation")
	}
	fmt.Fprintf(c.stdout, "compensation %s (%s) of %s: %s\n", clean(comp.ID), clean(comp.Tool), clean(id), clean(string(comp.State)))
	if comp.State == op.StateAwaitingApproval {
		fmt.Fprintf(c.stdout, "it needs approval by someone other than you: opledger ops approve %s -reason …\n", clean(comp.ID))
	}
	return nil
}

// printDetail prints an operation, its approval, its timeline, its
// attempts and its audit trail.
func printDetail(w io.Writer, d *ops.Detail) {
	o := d.Operation
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, clean(v))
		}
	}
	row("operation", o.ID)
	row("tool", fmt.Sprintf("%s (%s)", o.Tool, o.Class))
	row("status", string(o.State))
	row("workflow", o.WorkflowID)
	row("run", o.RunID)
	row("key", o.IdempotencyKey)
	args, ok := canonicalArgs(o)
	switch {
	case len(o.RedactedArgs) > 0:
		args += "  (sensitive, shown as ***: " + strings.Join(o.RedactedArgs, ", ") + "; args_hash covers their values)"
	case !ok:
		args += "  (WARNING: not what args_hash covers)"
	}
	row("arguments", args)
	row("args_hash", o.ArgsHash)
	row("proposed by", o.ProposedBy)
	row("compensates", o.CompensatesID)
	row("compensation", o.CompensationID)
	row("attempts", strconv.Itoa(o.AttemptCount))
	row("vendor ids", strings.Trim(strings.Join([]string{labelled("request", o.ExternalRequestID), labelled("object", o.ExternalObjectID)}, ", "), ", "))
	if o.LastError != "" {
		row("last error", o.LastErrorCategory+": "+o.LastError)
	}
	row("created", stamp(o.CreatedAt))
	row("updated", stamp(o.UpdatedAt))
	if a := d.Approval; a != nil {
		row("approval", approvalLine(a))
		for _, v := range a.Votes {
			row("", fmt.Sprintf("%s %s by %s: %s", stamp(v.At), v.Decision, v.Approver, v.Reason))
		}
	}
	_ = tw.Flush()

	fmt.Fprintln(w, "\ntimeline")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tEVENT\tFROM → TO\tACTOR\tREASON")
	for _, e := range d.Events {
		var detail map[string]string
		_ = wire.ReadJSON(e.Detail, &detail)
		why := detail["reason"]
		if why == "" {
			why = detail["why"]
		}
		if why == "" {
			why = detail["verdict"]
		}
		from := string(e.From)
		if from == "" {
			from = "·"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s → %s\t%s\t%s\n", stamp(e.At), clean(string(e.Event)), clean(from), clean(string(e.To)), clean(e.Actor), clean(why))
	}
	_ = tw.Flush()

	if len(d.Attempts) > 0 {
		fmt.Fprintln(w, "\nattempts")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "#\tSTARTED\tWORKER\tOUTCOME\tHTTP\tERROR")
		for _, at := range d.Attempts {
			status := ""
			if at.HTTPStatus != 0 {
				status = strconv.Itoa(at.HTTPStatus)
			}
			errText := at.ErrorCategory
			if at.Error != "" {
				errText += ": " + at.Error
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", at.Number, stamp(at.StartedAt), clean(at.Worker), clean(string(at.Outcome)), status, clean(errText))
		}
		_ = tw.Flush()
	}
	if len(d.Webhooks) > 0 {
		fmt.Fprintln(w, "\nwebhooks")
		printEvidence(w, d.Webhooks, false)
	}
	if len(d.Audit) > 0 {
		fmt.Fprintln(w, "\naudit")
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tACTOR\tACTION\tOUTCOME\tREASON")
		for _, a := range d.Audit {
			fmt.Fprintf(tw, "%s\t%s (%s)\t%s\t%s\t%s\n", stamp(a.At), clean(a.Actor), clean(a.Role), clean(a.Action), clean(a.Outcome), clean(a.Reason))
		}
		_ = tw.Flush()
	}
}

// canonicalArgs returns o's canonical arguments as the ledger hashed them
// (the API indents them; compacting restores the bytes) and whether they
// hash to o.ArgsHash: what an approver is shown must be what they approve.
func canonicalArgs(o *op.Operation) (string, bool) {
	var buf bytes.Buffer
	if err := json.Compact(&buf, o.Args); err != nil {
		return string(o.Args), false
	}
	sum := sha256.Sum256(buf.Bytes())
	return buf.String(), hex.EncodeToString(sum[:]) == o.ArgsHash
}

func approvalLine(a *store.ApprovalRequest) string {
	n := 0
	for _, v := range a.Votes {
		if v.Decision == "approve" {
			n++
		}
	}
	s := fmt.Sprintf("%s, %d of %d approvals", a.Status, n, a.Required)
	if a.Status == "pending" {
		s += ", expires " + stamp(a.ExpiresAt)
		if a.Expired {
			s += " (expired)"
		}
	}
	return clean(s)
}

func labelled(k, v string) string {
	if v == "" {
		return ""
	}
	return k + " " + v
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// age is a short duration for a table: 45s, 12m, 5h, 3d.
func age(d time.Duration) string {
	switch {
	case d < time.Minute:
		return strconv.Itoa(max(int(d.Seconds()), 0)) + "s"
	case d < time.Hour:
		return strconv.Itoa(int(d.Minutes())) + "m"
	case d < 48*time.Hour:
		return strconv.Itoa(int(d.Hours())) + "h"
	}
	return strconv.Itoa(int(d.Hours()/24)) + "d"
}

// clean makes text from the ledger safe to print on a terminal: agents
// and vendors wrote some of it, and neither a control character (an escape
// sequence) nor a format character (a bidirectional override that shows
// arguments in another order than they are) may reach the operator's
// terminal, least of all when they are shown what they approve.
func clean(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return '?'
		}
		return r
	}, s)
}

func loopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
