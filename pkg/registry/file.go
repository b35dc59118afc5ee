package registry

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// fileDoc is the YAML document as written by operators; compile turns each
// fileTool into a validated Tool. The yaml tags are the registry's field
// names: the decoder, docs/registry.md and schema/registry.schema.json all
// follow them (tests keep the three in step).
type fileDoc struct {
	Version  int                     `yaml:"version"`
	Tools    map[string]*fileTool    `yaml:"tools"`
	Webhooks map[string]*fileWebhook `yaml:"webhooks"`
}

type fileTool struct {
	Description     string              `yaml:"description"`
	SideEffectClass string              `yaml:"side_effect_class"`
	Version         int                 `yaml:"version"`
	Intent          string              `yaml:"intent"`
	Entity          *fileEntity         `yaml:"entity"`
	KeyTemplate     string              `yaml:"key_template"`
	ArgsSchema      map[string]any      `yaml:"args_schema"`
	Timeout         string              `yaml:"timeout"`
	ApplyBound      string              `yaml:"apply_bound"`
	Normalize       map[string][]string `yaml:"normalize"`
	Sensitive       []string            `yaml:"sensitive"`
	Retry           *fileRetry          `yaml:"retry"`
	Lease           *fileLease          `yaml:"lease"`
	Approval        *fileApproval       `yaml:"approval"`
	Dedupe          *fileDedupe         `yaml:"dedupe"`
	Guards          []fileGuard         `yaml:"guards"`
	Reconcile       *fileReconcile      `yaml:"reconcile"`
	Adapter         *fileAdapter        `yaml:"adapter"`
	Compensation    *fileCompensation   `yaml:"compensation"`
}

type fileCompensation struct {
	Tool      string            `yaml:"tool"`
	Args      map[string]string `yaml:"args"`
	OnFailure bool              `yaml:"on_failure"`
}

type fileEntity struct {
	Type string `yaml:"type"`
	ID   string `yaml:"id"`
}

type fileRetry struct {
	MaxAttempts    *int     `yaml:"max_attempts"`
	InitialBackoff string   `yaml:"initial_backoff"`
	MaxBackoff     string   `yaml:"max_backoff"`
	Jitter         *float64 `yaml:"jitter"` // nil: the default, as when there is no retry section
	MaxElapsed     string   `yaml:"max_elapsed"`
}

type fileLease struct {
	Required bool   `yaml:"required"`
	TTL      string `yaml:"ttl"`
}

type fileApproval struct {
	When  string `yaml:"when"`
	Field string `yaml:"field"`
	// Threshold and ApprovalsRequired are pointers so that a value written
	// where nothing reads it (approval.when: never) can be refused.
	Threshold         *int64 `yaml:"threshold"`
	ApprovalsRequired *int   `yaml:"approvals_required"`
	ExpiresAfter      string `yaml:"expires_after"`
}

type fileGuard struct {
	Kind  string          `yaml:"kind"`
	Scope string          `yaml:"scope"`
	Field string          `yaml:"field"`
	Limit *fileGuardLimit `yaml:"limit"`
}

type fileGuardLimit struct {
	Tool  string `yaml:"tool"`
	Field string `yaml:"field"`
}

type fileReconcile struct {
	MaxLookups int    `yaml:"max_lookups"`
	Interval   string `yaml:"interval"`
	Deadline   string `yaml:"deadline"`
}

type fileDedupe struct {
	Window      string `yaml:"window"`
	KeyTemplate string `yaml:"key_template"`
}

type fileAdapter struct {
	Type              string            `yaml:"type"`
	Vendor            string            `yaml:"vendor"`
	Method            string            `yaml:"method"`
	Path              string            `yaml:"path"`
	Body              *fileBody         `yaml:"body"`
	Headers           map[string]string `yaml:"headers"`
	SecretHeaders     map[string]string `yaml:"secret_headers"`
	IdempotencyHeader string            `yaml:"idempotency_header"`
	ReferenceHeader   string            `yaml:"reference_header"`
	StatusOutcomes    map[string]string `yaml:"status_outcomes"`
	ExternalIDPointer string            `yaml:"external_id_pointer"`
	StatusPointer     string            `yaml:"status_pointer"`
	PendingValues     []string          `yaml:"pending_values"`
	SucceededValues   []string          `yaml:"succeeded_values"`
	FailedValues      []string          `yaml:"failed_values"`
	RequestIDHeader   string            `yaml:"request_id_header"`
	RequestIDPointer  string            `yaml:"request_id_pointer"`
	ReplayedHeader    string            `yaml:"replayed_header"`
	Lookup            *fileLookup       `yaml:"lookup"`
	// type mcp
	Server              string      `yaml:"server"`
	Tool                string      `yaml:"tool"`
	IdempotencyArgument string      `yaml:"idempotency_argument"`
	ErrorOutcome        string      `yaml:"error_outcome"`
	Verify              *fileVerify `yaml:"verify"`
}

type fileVerify struct {
	Tool              string         `yaml:"tool"`
	Args              map[string]any `yaml:"args"`
	FoundPointer      string         `yaml:"found_pointer"`
	ExternalIDPointer string         `yaml:"external_id_pointer"`
	StatusPointer     string         `yaml:"status_pointer"`
	PendingValues     []string       `yaml:"pending_values"`
	SucceededValues   []string       `yaml:"succeeded_values"`
	FailedValues      []string       `yaml:"failed_values"`
}

type fileBody struct {
	Encoding string         `yaml:"encoding"`
	Fields   map[string]any `yaml:"fields"`
}

type fileLookup struct {
	Method            string   `yaml:"method"`
	Path              string   `yaml:"path"`
	FoundStatus       int      `yaml:"found_status"`
	NotFoundStatus    int      `yaml:"not_found_status"`
	ExternalIDPointer string   `yaml:"external_id_pointer"`
	StatusPointer     string   `yaml:"status_pointer"`
	PendingValues     []string `yaml:"pending_values"`
	SucceededValues   []string `yaml:"succeeded_values"`
	FailedValues      []string `yaml:"failed_values"`
}

// problems collects the problems of one tool.
type problems struct {
	tool string
	list []Problem
}

func (p *problems) add(field, format string, args ...any) {
	p.list = append(p.list, Problem{Tool: p.tool, Field: field, Msg: fmt.Sprintf(format, args...)})
}

// has reports whether field already has a problem.
func (p *problems) has(field string) bool {
	for _, had := range p.list {
		if had.Field == field {
			return true
		}
	}
	return false
}

func (p *problems) duration(field, s string, def time.Duration) time.Duration {
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil || d < 0 {
		p.add(field, "must be a duration like 500ms or 5s, got %q", s)
		return def
	}
	return d
}

func (ft *fileTool) compile(name string, opts Options) (*Tool, []Problem) {
	p := &problems{tool: name}
	if ft == nil {
		p.add("", "empty definition")
		return nil, p.list
	}
	t := &Tool{Name: name, Description: ft.Description, Class: op.SideEffectClass(ft.SideEffectClass),
		Version: ft.Version, Intent: ft.Intent}
	classes := make([]string, len(op.Classes))
	for i, c := range op.Classes {
		classes[i] = string(c)
	}
	switch {
	case ft.SideEffectClass == "":
		p.add("side_effect_class", "is required: one of %s", strings.Join(classes, ", "))
	case !t.Class.Valid():
		p.add("side_effect_class", "must be one of %s, got %q", strings.Join(classes, ", "), ft.SideEffectClass)
	}
	switch {
	case ft.Version == 0:
		p.add("version", "is required: an integer ≥ 1, part of every idempotency key")
	case ft.Version < 1:
		p.add("version", "must be an integer ≥ 1, got %d", ft.Version)
	}
	if t.Intent == "" {
		t.Intent = name
	}

	// Arguments schema: compiled once, used for every canonicalization.
	if ft.ArgsSchema == nil {
		p.add("args_schema", "is required (a JSON Schema object)")
	} else if raw, err := json.Marshal(ft.ArgsSchema); err != nil {
		p.add("args_schema", "cannot be expressed as JSON: %v", err)
	} else if s, err := canon.CompileSchema(name, raw); err != nil {
		p.add("args_schema", "%v", err)
	} else {
		t.schema, t.ArgsSchema = s, raw
	}
	if ft.ArgsSchema != nil {
		p.schemaKeywordProblems(ft.ArgsSchema)
	}

	// Idempotency key template.
	if ft.KeyTemplate == "" {
		// A read without a template is keyed by its tool and canonical args hash.
		if t.Class != op.ClassPureRead && t.Class.Valid() {
			p.add("key_template", "is required for a %s tool", t.Class)
		}
	} else if tmpl, err := canon.ParseTemplate(ft.KeyTemplate); err != nil {
		p.add("key_template", "%v", err)
	} else {
		t.key = tmpl
		p.checkFields("key_template", tmpl, ft.ArgsSchema)
		p.checkNoSlash("key_template", tmpl)
		if tmpl.Uses(canon.EntityVersionField) && (ft.Entity == nil || ft.Entity.ID == "") {
			p.add("key_template", "placeholder {%s} needs entity.type and entity.id: it counts changes of that entity", canon.EntityVersionField)
		}
	}

	if ft.Entity != nil {
		t.EntityType = ft.Entity.Type
		if ft.Entity.Type == "" {
			p.add("entity.type", "is required: the kind of business entity, e.g. order")
		}
		if ft.Entity.ID == "" {
			p.add("entity.id", "is required: a template over the args, e.g. \"{order_id}\"")
		} else if tmpl, err := canon.ParseTemplate(ft.Entity.ID); err != nil {
			p.add("entity.id", "%v", err)
		} else {
			t.entityID = tmpl
			p.checkFields("entity.id", tmpl, ft.ArgsSchema)
			p.checkNoSlash("entity.id", tmpl)
		}
	}

	t.Timeout = p.duration("timeout", ft.Timeout, 10*time.Second)
	if t.Timeout == 0 && !p.has("timeout") {
		p.add("timeout", "must be positive")
	}

	t.Retry = RetryPolicy{MaxAttempts: 1, InitialBackoff: 200 * time.Millisecond, MaxBackoff: 10 * time.Second, Jitter: 0.2,
		MaxElapsed: DefaultRetryMaxElapsed}
	if r := ft.Retry; r != nil {
		t.Retry.InitialBackoff = p.duration("retry.initial_backoff", r.InitialBackoff, t.Retry.InitialBackoff)
		t.Retry.MaxBackoff = p.duration("retry.max_backoff", r.MaxBackoff, t.Retry.MaxBackoff)
		t.Retry.MaxElapsed = p.duration("retry.max_elapsed", r.MaxElapsed, t.Retry.MaxElapsed)
		if t.Retry.MaxElapsed == 0 && r.MaxElapsed != "" {
			p.add("retry.max_elapsed", "must be positive")
		}
		switch {
		case r.MaxAttempts == nil:
			p.add("retry.max_attempts", "is required in a retry section: attempts in all, 1 to 100")
		case *r.MaxAttempts < 1 || *r.MaxAttempts > 100:
			p.add("retry.max_attempts", "must be between 1 and 100, got %d", *r.MaxAttempts)
		default:
			t.Retry.MaxAttempts = *r.MaxAttempts
		}
		if r.Jitter != nil {
			t.Retry.Jitter = *r.Jitter
			if *r.Jitter < 0 || *r.Jitter > 1 {
				p.add("retry.jitter", "must be between 0 and 1, got %v", *r.Jitter)
			}
		}
		if t.Retry.MaxBackoff < t.Retry.InitialBackoff {
			p.add("retry.max_backoff", "must not be below retry.initial_backoff")
		}
	}

	if l := ft.Lease; l != nil {
		t.Lease = LeasePolicy{Required: l.Required, TTL: p.duration("lease.ttl", l.TTL, 2*t.Timeout)}
		if l.Required && t.entityID == nil {
			p.add("lease.required", "an entity lease needs entity.type and entity.id")
		}
		switch {
		case l.TTL != "" && !l.Required:
			// Nothing reads a TTL of a lease that is never taken.
			p.add("lease.ttl", "has no effect without lease.required: true: no lease is taken")
		case l.TTL != "" && t.Lease.TTL < t.Timeout && !p.has("lease.ttl"):
			p.add("lease.ttl", "must not be shorter than timeout (%s): a call must end while its lease holds", t.Timeout)
		}
	}

	t.Approval = ApprovalRule{When: "never", Required: 1, ExpiresAfter: DefaultApprovalExpiry}
	if a := ft.Approval; a != nil {
		t.Approval = ApprovalRule{When: a.When, Field: a.Field, Required: 1,
			ExpiresAfter: p.duration("approval.expires_after", a.ExpiresAfter, DefaultApprovalExpiry)}
		if a.Threshold != nil {
			t.Approval.Threshold = *a.Threshold
		}
		if n := a.ApprovalsRequired; n != nil {
			t.Approval.Required = max(*n, 1)
			if *n < 1 || *n > 10 {
				p.add("approval.approvals_required", "must be between 1 and 10, got %d", *n)
			}
		}
		if t.Approval.ExpiresAfter == 0 && !p.has("approval.expires_after") {
			p.add("approval.expires_after", "must be a positive duration")
		}
		// A setting nothing reads is refused rather than ignored: the
		// operator meant something by it.
		unused := func(field, when string) {
			p.add(field, "has no effect with approval.when: %s", when)
		}
		switch a.When {
		case "never":
			if a.Field != "" {
				unused("approval.field", "never")
			}
			if a.Threshold != nil {
				unused("approval.threshold", "never")
			}
			if a.ApprovalsRequired != nil {
				unused("approval.approvals_required", "never")
			}
			if a.ExpiresAfter != "" {
				unused("approval.expires_after", "never")
			}
		case "always":
			if a.Field != "" {
				unused("approval.field", "always")
			}
			if a.Threshold != nil {
				unused("approval.threshold", "always")
			}
		case "above":
			if a.Field == "" {
				p.add("approval.field", "is required when approval.when is above")
			} else if !schemaHasField(ft.ArgsSchema, a.Field, "integer") {
				p.add("approval.field", "must name an integer argument, %q is not one", a.Field)
			}
		default:
			p.add("approval.when", "must be never, always or above, got %q", a.When)
		}
	}
	if t.Class == op.ClassExternalIrreversible && t.Approval.When == "never" && ft.Approval == nil {
		// Irreversible tools state their approval rule explicitly, even if it is "never".
		p.add("approval", "an external_irreversible tool must state its approval rule")
	}

	if d := ft.Dedupe; d != nil {
		switch t.Dedupe.Window = p.duration("dedupe.window", d.Window, 0); {
		case d.Window == "":
			p.add("dedupe.window", "is required: a positive duration such as 24h")
		case t.Dedupe.Window == 0 && !p.has("dedupe.window"):
			p.add("dedupe.window", "must be a positive duration")
		}
		if tmpl, err := canon.ParseTemplate(d.KeyTemplate); err != nil {
			p.add("dedupe.key_template", "%v", err)
		} else {
			t.Dedupe.key = tmpl
			p.checkFields("dedupe.key_template", tmpl, ft.ArgsSchema)
			p.checkNoSlash("dedupe.key_template", tmpl)
		}
	}

	p.adapter(t, ft.Adapter, ft.ArgsSchema, opts)

	if c := ft.Compensation; c != nil {
		if c.Tool == "" {
			p.add("compensation.tool", "is required")
		}
		if t.Class == op.ClassPureRead {
			p.add("compensation", "a pure_read tool has nothing to compensate")
		}
		for _, arg := range sortedKeys(c.Args) {
			tmpl, err := canon.ParseTemplate(c.Args[arg])
			if err != nil {
				p.add("compensation.args."+arg, "%v", err)
				continue
			}
			for _, f := range tmpl.Fields() {
				if !compensationFields[f] && !schemaHasField(ft.ArgsSchema, f, "") {
					p.add("compensation.args."+arg, "placeholder {%s} is neither a top-level property of args_schema "+
						"nor external_object_id, external_request_id or operation_id", f)
				} else if strings.Contains(f, ".") {
					p.add("compensation.args."+arg, "placeholder {%s}: compensation templates read top-level arguments only", f)
				}
			}
		}
		t.Compensation = &Compensation{Tool: c.Tool, Args: c.Args, OnFailure: c.OnFailure}
	}
	p.identity(t, ft)
	p.applyBound(t, ft)
	p.guards(t, ft)
	p.reconcile(t, ft)
	p.sensitive(t, ft)
	return t, p.list
}

// compensationFields are the placeholders a compensation template may use
// besides the original's arguments.
var compensationFields = map[string]bool{"external_object_id": true, "external_request_id": true, "operation_id": true}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func (p *problems) adapter(t *Tool, fa *fileAdapter, args map[string]any, opts Options) {
	if fa == nil {
		p.add("adapter", "is required")
		return
	}
	t.Adapter.Type = fa.Type
	switch fa.Type {
	case "http":
		for field, set := range map[string]bool{"server": fa.Server != "", "tool": fa.Tool != "",
			"idempotency_argument": fa.IdempotencyArgument != "", "error_outcome": fa.ErrorOutcome != "", "verify": fa.Verify != nil} {
			if set {
				p.add("adapter."+field, "is for adapter.type mcp only")
			}
		}
	case "mcp":
		p.mcpAdapter(t, fa, args)
		return
	default:
		p.add("adapter.type", "must be http or mcp, got %q", fa.Type)
		return
	}
	base := opts.vendorURL(fa.Vendor)
	if base == "" && opts.Catalog {
		base = catalogVendorURL
	}
	if fa.Vendor == "" {
		p.add("adapter.vendor", "is required")
	} else if base == "" {
		p.add("adapter.vendor", "no base URL for vendor %q (opledger's binaries read it from OPLEDGER_VENDOR_%s_URL)", fa.Vendor, strings.ToUpper(fa.Vendor))
	} else if u, err := url.Parse(base); err != nil || u.Scheme == "" || u.Host == "" {
		p.add("adapter.vendor", "base URL for vendor %q is not an absolute URL", fa.Vendor)
	}
	if !strings.HasPrefix(fa.Path, "/") {
		p.add("adapter.path", "must start with /, got %q", fa.Path)
	}
	t.Adapter.Vendor = fa.Vendor
	t.Adapter.VendorIdempotency = fa.IdempotencyHeader != ""
	if t.Class == op.ClassExternalIdempotent && fa.IdempotencyHeader == "" {
		p.add("adapter.idempotency_header", "an external_idempotent tool must pass our key to the vendor")
	}
	cfg := httpadapter.Config{
		Method: fa.Method, URL: strings.TrimRight(base, "/") + fa.Path, Headers: fa.Headers, SecretHeaders: fa.SecretHeaders,
		IdempotencyHeader: fa.IdempotencyHeader, ReferenceHeader: fa.ReferenceHeader, Timeout: t.Timeout,
		ExternalIDPointer: fa.ExternalIDPointer, StatusPointer: fa.StatusPointer, PendingValues: fa.PendingValues,
		FailedValues: fa.FailedValues, SucceededValues: fa.SucceededValues,
		RequestIDHeader: fa.RequestIDHeader, RequestIDPointer: fa.RequestIDPointer, ReplayedHeader: fa.ReplayedHeader,
		Secret: opts.Secret,
	}
	if opts.Catalog {
		// A catalog never calls the vendor: its secrets stay where they are.
		cfg.Secret = func(string) (string, bool) { return "catalog", true }
		t.catalog = true
	}
	p.statusValues("adapter.", fa.StatusPointer, fa.PendingValues, fa.FailedValues, fa.SucceededValues)
	if b := fa.Body; b != nil {
		cfg.Body = &httpadapter.BodyConfig{Encoding: b.Encoding, Fields: b.Fields}
	}
	if len(fa.StatusOutcomes) > 0 {
		cfg.StatusOutcomes = map[string]op.Outcome{}
		for code, o := range fa.StatusOutcomes {
			cfg.StatusOutcomes[code] = op.Outcome(o)
		}
	}
	if l := fa.Lookup; l != nil {
		if !strings.HasPrefix(l.Path, "/") {
			p.add("adapter.lookup.path", "must start with /, got %q", l.Path)
		}
		p.statusValues("adapter.lookup.", l.StatusPointer, l.PendingValues, l.FailedValues, l.SucceededValues)
		cfg.Lookup = &httpadapter.LookupConfig{
			Method: l.Method, URL: strings.TrimRight(base, "/") + l.Path, FoundStatus: l.FoundStatus,
			NotFoundStatus: l.NotFoundStatus, ExternalIDPointer: l.ExternalIDPointer,
			StatusPointer: l.StatusPointer, PendingValues: l.PendingValues,
			SucceededValues: l.SucceededValues, FailedValues: l.FailedValues,
		}
	} else if t.Class == op.ClassExternalIrreversible || t.Class == op.ClassExternalNonIdempotent {
		p.add("adapter.lookup", "a %s tool needs a lookup so ambiguous outcomes can be reconciled", t.Class)
	}
	t.Adapter.HTTP = cfg
	if base != "" {
		p.checkAdapter(cfg, args)
	}
}

// catalogVendorURL stands in for vendor base URLs in a catalog (Options.Catalog).
const catalogVendorURL = "http://catalog.invalid"

// mcpAdapter compiles adapter.type mcp: a tool of an upstream MCP server.
func (p *problems) mcpAdapter(t *Tool, fa *fileAdapter, args map[string]any) {
	for field, set := range map[string]bool{"vendor": fa.Vendor != "", "method": fa.Method != "", "path": fa.Path != "",
		"body": fa.Body != nil, "headers": len(fa.Headers) > 0, "secret_headers": len(fa.SecretHeaders) > 0,
		"idempotency_header": fa.IdempotencyHeader != "", "reference_header": fa.ReferenceHeader != "",
		"status_outcomes": len(fa.StatusOutcomes) > 0, "status_pointer": fa.StatusPointer != "",
		"pending_values": len(fa.PendingValues) > 0, "failed_values": len(fa.FailedValues) > 0,
		"succeeded_values": len(fa.SucceededValues) > 0, "request_id_header": fa.RequestIDHeader != "",
		"request_id_pointer": fa.RequestIDPointer != "", "replayed_header": fa.ReplayedHeader != "", "lookup": fa.Lookup != nil} {
		if set {
			p.add("adapter."+field, "is for adapter.type http only (an mcp tool answers through its result and adapter.verify)")
		}
	}
	cfg := mcpadapter.Config{Server: fa.Server, Tool: fa.Tool, IdempotencyArgument: fa.IdempotencyArgument,
		ErrorOutcome: op.Outcome(fa.ErrorOutcome), ExternalIDPointer: fa.ExternalIDPointer, Timeout: t.Timeout}
	if cfg.Tool == "" {
		cfg.Tool = t.Name
	}
	if v := fa.Verify; v != nil {
		cfg.Verify = &mcpadapter.VerifyConfig{Tool: v.Tool, Args: v.Args, FoundPointer: v.FoundPointer,
			ExternalIDPointer: v.ExternalIDPointer, StatusPointer: v.StatusPointer, PendingValues: v.PendingValues,
			FailedValues: v.FailedValues, SucceededValues: v.SucceededValues}
	}
	fields, probs := mcpadapter.Check(cfg)
	for _, err := range probs {
		var ce *mcpadapter.ConfigError
		if errors.As(err, &ce) {
			p.add("adapter."+ce.Field, "%s", ce.Reason)
		}
	}
	for _, f := range fields {
		if !schemaHasField(args, f, "") {
			p.add("adapter.verify.args", "placeholder {%s} is not a top-level property of args_schema", f)
		}
	}
	t.Adapter.MCP = &cfg
	t.Adapter.VendorIdempotency = fa.IdempotencyArgument != ""
	switch {
	case t.Class == op.ClassExternalIdempotent && fa.IdempotencyArgument == "":
		p.add("adapter.idempotency_argument", "an external_idempotent tool must pass our key to an upstream that deduplicates by it")
	case (t.Class == op.ClassExternalIrreversible || t.Class == op.ClassExternalNonIdempotent) && fa.Verify == nil:
		p.add("adapter.verify", "a %s tool needs a verify call so ambiguous outcomes can be reconciled", t.Class)
	}
}

// checkAdapter validates cfg the way it will be used, then checks that its
// templates read only arguments. httpadapter.New stops at its first problem,
// so when cfg fails, each part of it is also tried on its own: every
// problem comes out at once.
func (p *problems) checkAdapter(cfg httpadapter.Config, args map[string]any) {
	var placeholders []httpadapter.Placeholder
	if a, err := httpadapter.New(cfg, nil); err == nil {
		placeholders = a.Placeholders()
	} else {
		p.configError(err)
		const elsewhere = "http://vendor.invalid/" // stands in for the URL while another part is tried
		base := httpadapter.Config{URL: elsewhere, Method: cfg.Method, Timeout: cfg.Timeout}
		if _, err := httpadapter.New(base, nil); err != nil {
			base.Method, base.Timeout = "", 0 // reported above
		}
		var parts []httpadapter.Config
		part := func(edit func(*httpadapter.Config)) {
			c := base
			edit(&c)
			parts = append(parts, c)
		}
		part(func(c *httpadapter.Config) { c.URL = cfg.URL })
		keyHeaders := func(c *httpadapter.Config) {
			c.IdempotencyHeader, c.ReferenceHeader, c.Secret = cfg.IdempotencyHeader, cfg.ReferenceHeader, cfg.Secret
		}
		for _, name := range sortedKeys(cfg.Headers) {
			part(func(c *httpadapter.Config) { keyHeaders(c); c.Headers = map[string]string{name: cfg.Headers[name]} })
		}
		for _, name := range sortedKeys(cfg.SecretHeaders) {
			part(func(c *httpadapter.Config) {
				keyHeaders(c)
				c.SecretHeaders = map[string]string{name: cfg.SecretHeaders[name]}
			})
		}
		part(func(c *httpadapter.Config) {
			keyHeaders(c)
			c.Headers, c.SecretHeaders = cfg.Headers, cfg.SecretHeaders
		})
		if b := cfg.Body; b != nil {
			for _, name := range sortedKeys(b.Fields) {
				part(func(c *httpadapter.Config) {
					c.Body = &httpadapter.BodyConfig{Encoding: b.Encoding, Fields: map[string]any{name: b.Fields[name]}}
				})
			}
			part(func(c *httpadapter.Config) { c.Body = b })
		}
		for _, code := range sortedKeys(cfg.StatusOutcomes) {
			part(func(c *httpadapter.Config) { c.StatusOutcomes = map[string]op.Outcome{code: cfg.StatusOutcomes[code]} })
		}
		part(func(c *httpadapter.Config) {
			c.ExternalIDPointer, c.RequestIDPointer, c.StatusPointer = cfg.ExternalIDPointer, cfg.RequestIDPointer, cfg.StatusPointer
			c.PendingValues, c.FailedValues, c.SucceededValues = cfg.PendingValues, cfg.FailedValues, cfg.SucceededValues
		})
		part(func(c *httpadapter.Config) {
			c.RequestIDHeader, c.ReplayedHeader = cfg.RequestIDHeader, cfg.ReplayedHeader
		})
		part(func(c *httpadapter.Config) { c.Lookup = cfg.Lookup })
		for _, part := range parts {
			a, err := httpadapter.New(part, nil)
			if err != nil {
				p.configError(err)
				continue
			}
			placeholders = append(placeholders, a.Placeholders()...)
		}
	}
	seen := map[httpadapter.Placeholder]bool{}
	for _, ph := range placeholders {
		if seen[ph] {
			continue
		}
		seen[ph] = true
		if !schemaHasField(args, ph.Arg, "") {
			p.add(registryField(ph.Field), "placeholder {%s} is not a property of args_schema", ph.Arg)
		}
	}
}

// statusValues reports every problem with a status pointer's value lists,
// each under its own field (prefix "adapter." or "adapter.lookup."):
// httpadapter.New stops at the first.
func (p *problems) statusValues(prefix, pointer string, pending, failed, succeeded []string) {
	lists := []struct {
		field  string
		values []string
	}{
		{prefix + "pending_values", pending},
		{prefix + "failed_values", failed},
		{prefix + "succeeded_values", succeeded},
	}
	seen := map[string]string{} // value -> field of the first list holding it
	for _, list := range lists {
		if len(list.values) > 0 && pointer == "" {
			p.add(list.field, "needs %sstatus_pointer", prefix)
		}
		for _, v := range list.values {
			if v == "" {
				p.add(list.field, "contains an empty value")
				continue
			}
			if other, dup := seen[v]; dup && other != list.field {
				p.add(list.field, "%q is also in %s", v, other)
				continue
			}
			seen[v] = list.field
		}
	}
}

// configFields maps httpadapter.Config fields to registry fields.
var configFields = map[string]string{
	"Method": "adapter.method", "URL": "adapter.path", "Body": "adapter.body", "Body.Encoding": "adapter.body.encoding",
	"Body.Fields": "adapter.body.fields", "Headers": "adapter.headers", "SecretHeaders": "adapter.secret_headers",
	"IdempotencyHeader": "adapter.idempotency_header", "ReferenceHeader": "adapter.reference_header",
	"RequestIDHeader": "adapter.request_id_header", "RequestIDPointer": "adapter.request_id_pointer",
	"ReplayedHeader": "adapter.replayed_header", "Timeout": "timeout", "StatusOutcomes": "adapter.status_outcomes",
	"ExternalIDPointer": "adapter.external_id_pointer", "StatusPointer": "adapter.status_pointer",
	"PendingValues": "adapter.pending_values", "FailedValues": "adapter.failed_values",
	"SucceededValues": "adapter.succeeded_values",
	"Lookup.Method":   "adapter.lookup.method", "Lookup.URL": "adapter.lookup.path",
	"Lookup.FoundStatus": "adapter.lookup.found_status", "Lookup.NotFoundStatus": "adapter.lookup.not_found_status",
	"Lookup.ExternalIDPointer": "adapter.lookup.external_id_pointer", "Lookup.StatusPointer": "adapter.lookup.status_pointer",
	"Lookup.PendingValues": "adapter.lookup.pending_values", "Lookup.FailedValues": "adapter.lookup.failed_values",
	"Lookup.SucceededValues": "adapter.lookup.succeeded_values",
}

// configName matches a Config field as httpadapter spells it in
// ConfigError.Field and Reason: Lookup.StatusPointer, Headers["X-Key"],
// Body.Fields["a"]["b"][0].
var configName = regexp.MustCompile(`(?:Lookup\.|Body\.)?[A-Z][A-Za-z]*(?:\["(?:[^"\\]|\\.)*"\]|\[[0-9]+\])*`)

// registryField spells a Config field the way the registry file does:
// Headers["X-Key"] is adapter.headers.X-Key, Body.Fields["a"][0] is
// adapter.body.fields.a[0]. It returns "" for a name it does not know.
func registryField(name string) string {
	base, keys, _ := strings.Cut(name, "[")
	field, ok := configFields[base]
	if !ok {
		return ""
	}
	if keys == "" {
		return field
	}
	for rest := "[" + keys; rest != ""; {
		if q, err := strconv.QuotedPrefix(rest[1:]); err == nil && strings.HasPrefix(rest[1+len(q):], "]") {
			key, _ := strconv.Unquote(q)
			field += "." + key // ["X-Key"]
			rest = rest[len(q)+2:]
			continue
		}
		end := strings.IndexByte(rest, ']')
		if end < 0 {
			return field
		}
		field += rest[:end+1] // [0]
		rest = rest[end+1:]
	}
	return field
}

// userTerms rewrites the Config field names in an httpadapter reason in the
// registry's terms (a reason about a lookup may name a lookup field without
// its Lookup. prefix).
func userTerms(reason string, lookup bool) string {
	return configName.ReplaceAllStringFunc(reason, func(name string) string {
		if f := registryField(name); f != "" {
			return f
		}
		if lookup {
			if f := registryField("Lookup." + name); f != "" {
				return f
			}
		}
		return name
	})
}

// configError reports an httpadapter.New error under the registry field it
// is about, unless that field already has a problem (found by compile
// itself); an error naming no known field is reported under "adapter".
func (p *problems) configError(err error) {
	var ce *httpadapter.ConfigError
	if !errors.As(err, &ce) {
		p.add("adapter", "%v", err)
		return
	}
	field := registryField(ce.Field)
	if field == "" {
		p.add("adapter", "%v", err)
		return
	}
	base, _, _ := strings.Cut(ce.Field, "[")
	for _, had := range p.list {
		if had.Field == field || had.Field == configFields[base] {
			return
		}
	}
	p.add(field, "%s", userTerms(ce.Reason, strings.HasPrefix(ce.Field, "Lookup.")))
}

// identity compiles the tool's identity: the fields its key, entity and
// dedupe templates name, and the normalizers the registry gives fields.
func (p *problems) identity(t *Tool, ft *fileTool) {
	var fields []string
	for _, tmpl := range []*canon.Template{t.key, t.entityID, t.Dedupe.key} {
		if tmpl == nil {
			continue
		}
		for _, f := range tmpl.Fields() {
			if f != canon.ArgsHashField && f != canon.EntityVersionField {
				fields = append(fields, f)
			}
		}
	}
	for _, f := range sortedKeys(ft.Normalize) {
		if !schemaHasField(ft.ArgsSchema, f, "string") {
			p.add("normalize."+f, "must name a string property of args_schema")
		}
		if len(ft.Normalize[f]) == 0 {
			p.add("normalize."+f, "needs at least one normalizer: %s", strings.Join(canon.NormalizerNames(), ", "))
		}
	}
	id, err := canon.NewIdentity(fields, ft.Normalize)
	if err != nil {
		p.add("normalize", "%v", strings.TrimPrefix(err.Error(), canon.ErrInvalidSchema.Error()+": "))
		return
	}
	t.identity = id
}

// Guard kinds.
const (
	// GuardOncePerEntity: at most one operation of the tool per entity that
	// has had, or may be having, an effect (no second refund of a charge).
	GuardOncePerEntity = "once_per_entity"
	// GuardTotalAtMost: the field's total over the tool's operations on the
	// entity, this one included, is at most the limit tool's field on the
	// completed operation whose vendor object is the entity (no refunds
	// above the captured amount).
	GuardTotalAtMost = "total_at_most"
)

func (p *problems) guards(t *Tool, ft *fileTool) {
	for i, g := range ft.Guards {
		f := fmt.Sprintf("guards.%d", i)
		if t.entityID == nil {
			p.add(f, "a guard needs entity.type and entity.id: it is checked against the entity's operations")
		}
		switch g.Kind {
		case GuardOncePerEntity:
			if g.Field != "" || g.Limit != nil {
				p.add(f, "kind once_per_entity takes no field or limit")
			}
		case GuardTotalAtMost:
			if !schemaHasField(ft.ArgsSchema, g.Field, "integer") {
				p.add(f+".field", "must name an integer argument, %q is not one", g.Field)
			}
			if g.Limit == nil || g.Limit.Tool == "" || g.Limit.Field == "" {
				p.add(f+".limit", "needs tool and field: the operation whose vendor object is this tool's entity, and its integer argument")
			}
		default:
			p.add(f+".kind", "must be %s or %s, got %q", GuardOncePerEntity, GuardTotalAtMost, g.Kind)
			continue
		}
		if g.Scope != "" && !schemaHasField(ft.ArgsSchema, g.Scope, "string") {
			p.add(f+".scope", "must name a string argument, %q is not one", g.Scope)
		}
		gd := Guard{Kind: g.Kind, Scope: g.Scope, Field: g.Field}
		if g.Limit != nil {
			gd.LimitTool, gd.LimitField = g.Limit.Tool, g.Limit.Field
		}
		t.Guards = append(t.Guards, gd)
	}
}

// Reconciliation schedule defaults.
const (
	DefaultMaxLookups     = 20
	DefaultLookupInterval = 10 * time.Second
	DefaultLookupDeadline = 10 * time.Minute
)

func (p *problems) reconcile(t *Tool, ft *fileTool) {
	t.Reconcile = ReconcileSchedule{MaxLookups: DefaultMaxLookups, Interval: DefaultLookupInterval, Deadline: DefaultLookupDeadline}
	r := ft.Reconcile
	if r == nil {
		return
	}
	if ft.Adapter != nil && ft.Adapter.Lookup == nil && ft.Adapter.Verify == nil {
		// The schedule spaces and bounds lookups; without a lookup (an
		// mcp tool's verify call is its lookup) the reconciler decides at
		// once (sends again under the same key when the vendor
		// deduplicates by it, else escalates) and reads none of it.
		p.add("reconcile", "has no effect without adapter.lookup (or, for an mcp tool, adapter.verify): the reconciler has nothing to ask the vendor, so it decides at once")
	}
	if r.MaxLookups != 0 {
		if r.MaxLookups < 1 || r.MaxLookups > 1000 {
			p.add("reconcile.max_lookups", "must be between 1 and 1000, got %d", r.MaxLookups)
		}
		t.Reconcile.MaxLookups = r.MaxLookups
	}
	t.Reconcile.Interval = p.duration("reconcile.interval", r.Interval, DefaultLookupInterval)
	t.Reconcile.Deadline = p.duration("reconcile.deadline", r.Deadline, DefaultLookupDeadline)
	if (t.Reconcile.Interval == 0 && !p.has("reconcile.interval")) || (t.Reconcile.Deadline == 0 && !p.has("reconcile.deadline")) {
		p.add("reconcile", "interval and deadline must be positive")
	}
}

// DefaultApplyBound is apply_bound for a tool whose vendor does not
// deduplicate by our key (external_non_idempotent, or external_irreversible
// without an idempotency header) and whose registry entry says nothing.
const DefaultApplyBound = 5 * time.Minute

// applyBound sets how long after a request was sent the vendor may still
// apply it: until then, a lookup's "not found" proves nothing.
func (p *problems) applyBound(t *Tool, ft *fileTool) {
	if !t.Class.External() || t.Adapter.VendorIdempotency {
		// The vendor dedupes by our key (or nothing leaves our boundary):
		// a second request cannot make a second effect.
		t.ApplyBound = p.duration("apply_bound", ft.ApplyBound, 0)
		return
	}
	t.ApplyBound = p.duration("apply_bound", ft.ApplyBound, DefaultApplyBound)
	if ft.ApplyBound != "" && t.ApplyBound < t.Timeout && !p.has("apply_bound") && !p.has("timeout") {
		p.add("apply_bound", "must not be shorter than timeout (%s): a request may be applied as long as it may be in flight", t.Timeout)
	}
}

// checkFields reports template placeholders that are not arguments
// ({_args_hash} is computed, not an argument; {entity_version} is filled in
// when the intent is accepted, and only in a key template).
// sensitive checks the tool's sensitive arguments: each names a property of
// args_schema, once, and none is where opledger prints or sends values in
// the clear: in the key, entity or dedupe template (keys are shown
// everywhere), normalized as an identity field, in the vendor URL (errors
// quote URLs), or a guard's field or scope (refusals quote them).
func (p *problems) sensitive(t *Tool, ft *fileTool) {
	seen := map[string]bool{}
	for i, f := range ft.Sensitive {
		field := fmt.Sprintf("sensitive[%d]", i)
		switch {
		case f == "" || !schemaHasField(ft.ArgsSchema, f, ""):
			p.add(field, "%q is not a property of args_schema", f)
			continue
		case seen[f]:
			p.add(field, "%s is listed twice", f)
			continue
		}
		seen[f] = true
		under := func(g string) bool { return g == f || strings.HasPrefix(g, f+".") || strings.HasPrefix(f, g+".") }
		for name, tmpl := range map[string]*canon.Template{"key_template": t.key, "entity.id": t.entityID, "dedupe.key_template": t.Dedupe.key} {
			if tmpl != nil && slices.ContainsFunc(tmpl.Fields(), under) {
				p.add(field, "%s is in %s: keys and entity ids are shown in results, logs and the API; identify the call by other arguments (its hash still covers %s)", f, name, f)
			}
		}
		for n := range ft.Normalize {
			if under(n) {
				p.add(field, "%s is normalized as an identity field (normalize.%s): identity fields are not sensitive", f, n)
			}
		}
		if fa := ft.Adapter; fa != nil {
			paths := map[string]string{"adapter.path": fa.Path}
			if fa.Lookup != nil {
				paths["adapter.lookup.path"] = fa.Lookup.Path
			}
			for name, path := range paths {
				if strings.Contains(path, "{"+f+"}") || strings.Contains(path, "{"+f+".") {
					p.add(field, "%s is in %s: a URL is quoted in errors and vendor logs; send it in the body", f, name)
				}
			}
		}
		for j, g := range ft.Guards {
			if under(g.Field) || under(g.Scope) {
				p.add(field, "%s is guards[%d]'s field or scope, which refusals quote", f, j)
			}
		}
	}
	t.Sensitive = slices.Clone(ft.Sensitive)
}

// checkNoSlash refuses '/' in an identity template's literal text: '/'
// separates a tenant from its keys (<tenant>/<key>), and values never
// render one (canon escapes it), so a key of the default tenant can never
// equal a named tenant's. "acme/{order_id}" would render, for the default
// tenant, tenant acme's key of a tool keyed "{order_id}".
func (p *problems) checkNoSlash(field string, tmpl *canon.Template) {
	if strings.Contains(tmpl.Literal(), "/") {
		p.add(field, "'/' is reserved: it separates a tenant from its keys (<tenant>/<key>); use ':' between parts")
	}
}

func (p *problems) checkFields(field string, tmpl *canon.Template, schema map[string]any) {
	for _, f := range tmpl.Fields() {
		if f == canon.EntityVersionField && field == "key_template" && !schemaHasField(schema, f, "") {
			continue
		}
		if f != canon.ArgsHashField && !schemaHasField(schema, f, "") {
			p.add(field, "placeholder {%s} is not a property of args_schema", f)
		}
	}
}

// schemaHasField reports whether the dotted path names a property of the
// object schema, of the given JSON type when typ is not "". A numeric
// segment ("items.0.sku") names an element of an array schema's items.
func schemaHasField(schema map[string]any, path, typ string) bool {
	cur := schema
	parts := strings.Split(path, ".")
	for i, part := range parts {
		props, _ := cur["properties"].(map[string]any)
		next, ok := props[part].(map[string]any)
		if !ok {
			if _, err := strconv.ParseUint(part, 10, 32); err == nil {
				next, ok = cur["items"].(map[string]any)
			}
			if !ok {
				return false
			}
		}
		if i == len(parts)-1 {
			return typ == "" || next["type"] == typ
		}
		cur = next
	}
	return false
}
