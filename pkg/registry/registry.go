// Package registry loads the operator's tool registry: for each tool its
// side-effect class, argument schema, idempotency key template, entity
// reference, timeout, retry policy, lease and approval rules, semantic dedupe
// window, adapter settings and compensation playbook.
//
// The registry is the only authority on how a tool may be executed. Hints
// from outside (an MCP client's annotations, a model's claims) never override
// it. Loading validates everything and reports every problem with its file,
// line, tool and field, in the file's terms; a registry with problems is
// never returned. docs/registry.md is the reference for the file, and
// schema/registry.schema.json its JSON Schema; tests keep both in step with
// the yaml tags of the file structs in file.go.
package registry

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/adapter/mcpadapter"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// Registry is a validated set of tools. It is immutable and safe for concurrent use.
type Registry struct {
	tools map[string]*Tool
	names []string
	// webhooks are the providers of the webhooks section.
	webhooks map[string]*Webhook
}

// Tool is one registered tool, validated and compiled.
type Tool struct {
	Name        string
	Description string
	Class       op.SideEffectClass
	Version     int
	// Intent is the business intent label recorded on every operation.
	Intent string
	// EntityType and the rendered EntityID template name the business entity.
	EntityType string
	entityID   *canon.Template
	key        *canon.Template
	schema     *canon.Schema
	// ArgsSchema is the raw JSON Schema (for MCP tool listings and docs).
	ArgsSchema json.RawMessage
	Timeout    time.Duration
	// ApplyBound is how long after a request was sent the vendor may still
	// apply it. Until it has passed (and the settle delay after it, on the
	// database's clock), a lookup that finds nothing is not evidence that
	// the request was never applied; a tool whose vendor deduplicates by
	// our key has none.
	ApplyBound   time.Duration
	identity     *canon.Identity
	Retry        RetryPolicy
	Lease        LeasePolicy
	Approval     ApprovalRule
	Dedupe       DedupeWindow
	Guards       []Guard
	Reconcile    ReconcileSchedule
	Adapter      AdapterSpec
	Compensation *Compensation
	// Sensitive are the argument paths whose values opledger never shows:
	// they are sent to the vendor and covered by the arguments' hash, and
	// redacted wherever arguments are shown (RedactArgs) and in the kept
	// bytes of a rejected intent.
	Sensitive []string
	// catalog: loaded with Options.Catalog; its adapters are never built.
	catalog bool
}

// RetryPolicy bounds retries of attempts confirmed not applied (429, connect
// refused). Ambiguous outcomes are never retried by this policy: they go to
// reconciliation.
type RetryPolicy struct {
	MaxAttempts    int
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
	// Jitter is the random fraction (0..1) applied to each backoff.
	Jitter float64
	// MaxElapsed also bounds the budget: no retry starts once this long has
	// passed since the operation (or its reopened generation) began.
	MaxElapsed time.Duration
}

// DefaultRetryMaxElapsed is retry.max_elapsed when the registry says nothing.
const DefaultRetryMaxElapsed = 10 * time.Minute

// LeasePolicy says whether an operation must hold its entity's lease while in flight.
type LeasePolicy struct {
	Required bool
	TTL      time.Duration
}

// ApprovalRule says when an operation needs approval before dispatch.
type ApprovalRule struct {
	// When is "never", "always" or "above" (Field's integer value > Threshold).
	When      string
	Field     string
	Threshold int64
	// Required distinct approvers, never the proposer (dual control: 2).
	Required int
	// ExpiresAfter the request, an operation still awaiting approval is
	// cancelled.
	ExpiresAfter time.Duration
}

// DefaultApprovalExpiry is approval.expires_after when unset.
const DefaultApprovalExpiry = 24 * time.Hour

// Guard is a state guard checked against the ledger before an operation is
// created (see GuardOncePerEntity, GuardTotalAtMost).
type Guard struct {
	Kind string
	// Scope, when set, narrows the guard to the entity's operations of the
	// tool whose argument Scope equals this one's (a refund guard per charge
	// on a customer's entity); the limit operation is the one whose vendor
	// object id is that argument. Empty: the whole entity.
	Scope string
	Field string
	// LimitTool and LimitField name the limit of GuardTotalAtMost.
	LimitTool, LimitField string
}

// ReconcileSchedule is how the reconciler asks the vendor about an
// ambiguous outcome before a person must.
type ReconcileSchedule struct {
	// MaxLookups that fail, or find the effect still pending, before the
	// operation is escalated.
	MaxLookups int
	// Interval between lookups.
	Interval time.Duration
	// Deadline: past it since the outcome became ambiguous, on the
	// database's clock, an operation without a verdict is escalated.
	Deadline time.Duration
}

// DedupeWindow is policy-level duplicate suppression beyond the key: within
// Window, a second operation whose KeyTemplate renders the same is suppressed.
type DedupeWindow struct {
	Window time.Duration
	key    *canon.Template
}

// AdapterSpec selects and configures the adapter.
type AdapterSpec struct {
	// Type is "http", the generic HTTP adapter, or "mcp", a tool of an
	// upstream MCP server (MCP is then set).
	Type string
	// Vendor names the base URL the HTTP adapter's path is joined to.
	Vendor string
	HTTP   httpadapter.Config
	// MCP configures an mcp adapter.
	MCP *mcpadapter.Config
	// VendorIdempotency says the vendor deduplicates by our key (so an
	// ambiguous attempt may be re-sent under the same key).
	VendorIdempotency bool
}

// HasLookup reports whether the vendor can be asked about an earlier call:
// an HTTP lookup, or an MCP verify tool.
func (s AdapterSpec) HasLookup() bool {
	if s.Type == "mcp" {
		return s.MCP != nil && s.MCP.Verify != nil
	}
	return s.HTTP.Lookup != nil
}

// Dependencies are what adapters need at run time.
type Dependencies struct {
	// HTTP carries the HTTP adapters' requests (nil: a default client).
	HTTP *http.Client
	// MCP holds the sessions to upstream MCP servers, for mcp adapters.
	MCP *mcpadapter.Pool
}

// Compensation is the approved playbook for undoing an operation: another
// tool, with args rendered from the original's canonical args and external ids.
type Compensation struct {
	Tool string
	// Args maps each compensation argument to a template over the original
	// operation: {field} of its top-level args, {external_object_id},
	// {external_request_id}, {operation_id}.
	Args map[string]string
	// OnFailure runs the playbook by itself when an operation of the tool
	// fails permanently after it may have reached the vendor (not when
	// every attempt was refused before any effect: nothing was done). An
	// operator's "give up" on an escalated operation runs it whatever this
	// says.
	OnFailure bool
}

// NewAdapter builds the tool's adapter over client (nil: a default client).
// An mcp tool needs NewAdapterWith.
func (t *Tool) NewAdapter(client *http.Client) (adapter.Adapter, error) {
	return t.NewAdapterWith(Dependencies{HTTP: client})
}

// NewAdapterWith builds the tool's adapter over d. Errors: a registry
// loaded as a catalog, an mcp tool whose upstream d.MCP does not know.
func (t *Tool) NewAdapterWith(d Dependencies) (adapter.Adapter, error) {
	if t.catalog {
		return nil, fmt.Errorf("tool %s: adapter: the registry was loaded as a catalog (no vendors): %w", t.Name, op.ErrInvalid)
	}
	var a adapter.Adapter
	var err error
	if t.Adapter.Type == "mcp" {
		a, err = mcpadapter.New(*t.Adapter.MCP, d.MCP)
	} else {
		a, err = httpadapter.New(t.Adapter.HTTP, d.HTTP)
	}
	if err != nil {
		return nil, fmt.Errorf("tool %s: adapter: %w", t.Name, err)
	}
	return a, nil
}

// Adapters builds every tool's adapter, keyed by tool name. A registry
// with mcp tools needs AdaptersWith.
func (r *Registry) Adapters(client *http.Client) (map[string]adapter.Adapter, error) {
	return r.AdaptersWith(Dependencies{HTTP: client})
}

// AdaptersWith builds every tool's adapter over d, keyed by tool name.
func (r *Registry) AdaptersWith(d Dependencies) (map[string]adapter.Adapter, error) {
	out := make(map[string]adapter.Adapter, len(r.tools))
	for name, t := range r.tools {
		a, err := t.NewAdapterWith(d)
		if err != nil {
			return nil, err
		}
		out[name] = a
	}
	return out, nil
}

// MCPServers lists the upstream MCP servers the registry's mcp tools name,
// sorted.
func (r *Registry) MCPServers() []string {
	var out []string
	for _, name := range r.names {
		if m := r.tools[name].Adapter.MCP; m != nil && !slices.Contains(out, m.Server) {
			out = append(out, m.Server)
		}
	}
	sort.Strings(out)
	return out
}

// Names returns the tool names in sorted order.
func (r *Registry) Names() []string { return append([]string(nil), r.names...) }

// Tool returns the named tool. Errors: op.ErrNotFound.
func (r *Registry) Tool(name string) (*Tool, error) {
	t, ok := r.tools[name]
	if !ok {
		return nil, fmt.Errorf("tool %q is not registered: %w", name, op.ErrNotFound)
	}
	return t, nil
}

// Problem is one thing wrong with a registry, in the registry file's terms.
type Problem struct {
	// File is the source's name (its path); "" when it has none.
	File string
	// Line is the 1-based line the problem is about; 0 when unknown.
	Line int
	// Tool is the tool's name; "" for the document itself.
	Tool string
	// Field is the dotted path of the field within the tool (or the
	// document), e.g. "retry.max_attempts"; "" for the tool itself.
	Field string
	Msg   string
}

// String renders the problem as
// "file:line: tool name: field: message", leaving out what is unknown.
func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.File != "" && p.Line > 0:
		fmt.Fprintf(&b, "%s:%d: ", p.File, p.Line)
	case p.File != "":
		b.WriteString(p.File + ": ")
	case p.Line > 0:
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Tool != "" {
		b.WriteString("tool " + p.Tool + ": ")
	}
	if p.Field != "" {
		b.WriteString(p.Field + ": ")
	}
	b.WriteString(p.Msg)
	return b.String()
}

// LoadError lists every problem found while loading. It matches op.ErrInvalid.
type LoadError struct {
	Problems []Problem
}

func (e *LoadError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return fmt.Sprintf("registry has %d problem(s):\n  %s", len(lines), strings.Join(lines, "\n  "))
}

// Unwrap makes errors.Is(err, op.ErrInvalid) true.
func (e *LoadError) Unwrap() error { return op.ErrInvalid }

// Options configure loading. The registry reads nothing from the
// environment itself: the program supplies vendor URLs and secrets at its
// edge (opledger's binaries read OPLEDGER_VENDOR_<NAME>_URL and the
// environment variables that ${NAME} references name).
type Options struct {
	// Vendors maps a vendor name to its base URL.
	Vendors map[string]string
	// VendorURL is asked for a vendor missing from Vendors; may be nil.
	VendorURL func(vendor string) (string, bool)
	// Secret resolves the ${NAME} references in adapter.secret_headers; nil
	// makes any such reference a problem. Resolved values never appear in a
	// Problem.
	Secret func(name string) (string, bool)
	// Catalog loads the registry to list its tools and prepare proposals
	// only (an MCP server's tool listing): vendor base URLs and secrets are
	// not needed, nothing is read for them, and adapters cannot be built.
	Catalog bool
}

// vendorURL returns the base URL of a vendor, or "".
func (o Options) vendorURL(name string) string {
	if u := o.Vendors[name]; u != "" {
		return u
	}
	if o.VendorURL != nil {
		if u, ok := o.VendorURL(name); ok {
			return u
		}
	}
	return ""
}

// Source is one registry document and the name it is reported under
// (its file path).
type Source struct {
	Name string
	Data []byte
}

// LoadPaths reads and validates a registry split over several files: each
// path is a YAML file, or a directory whose *.yaml and *.yml files (not its
// subdirectories) are read in name order. See LoadSources.
func LoadPaths(paths []string, opts Options) (*Registry, error) {
	if len(paths) == 0 {
		return nil, fmt.Errorf("registry: no file given: %w", op.ErrInvalid)
	}
	var srcs []Source
	for _, path := range paths {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("registry: %w", err)
		}
		files := []string{path}
		if fi.IsDir() {
			files = nil
			entries, err := os.ReadDir(path)
			if err != nil {
				return nil, fmt.Errorf("registry: %w", err)
			}
			for _, e := range entries {
				if ext := filepath.Ext(e.Name()); !e.IsDir() && (ext == ".yaml" || ext == ".yml") {
					files = append(files, filepath.Join(path, e.Name()))
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("registry: directory %s has no .yaml or .yml file: %w", path, op.ErrInvalid)
			}
		}
		for _, f := range files {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil, fmt.Errorf("registry: %w", err)
			}
			srcs = append(srcs, Source{Name: f, Data: data})
		}
	}
	return LoadSources(srcs, opts)
}

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Load parses and validates a registry document. All problems are reported
// together in a *LoadError.
func Load(data []byte, opts Options) (*Registry, error) {
	return LoadSources([]Source{{Data: data}}, opts)
}

// LoadSources parses and validates a registry made of several documents:
// together they define the tools, and a tool defined in two of them is a
// problem. All problems are reported together in a *LoadError, in file and
// line order, each naming its source when the source has a name.
func LoadSources(srcs []Source, opts Options) (*Registry, error) {
	var probs []Problem
	tools := map[string]sourceTool{}
	hooks := map[string]sourceWebhook{}
	fileOrder := map[string]int{}
	for i, src := range srcs {
		fileOrder[src.Name] = i
		dec, dp := decodeSource(src)
		probs = append(probs, dp...)
		if dec == nil {
			continue
		}
		if dec.doc.Version != 1 && !slices.Contains(dec.shadow[""], "version") {
			pr := Problem{File: src.Name, Field: "version", Msg: fmt.Sprintf("must be 1, got %d", dec.doc.Version)}
			if e, ok := lookupKey(dec.root, "version"); ok {
				pr.Line = e.key.Line
			} else {
				pr.Msg = "is required: write version: 1 at the top of the file"
			}
			probs = append(probs, pr)
		}
		for _, name := range dec.order {
			node := dec.tools[name]
			if other, dup := tools[name]; dup {
				probs = append(probs, Problem{File: src.Name, Line: node.key.Line, Tool: name,
					Msg: fmt.Sprintf("also defined in %s (line %d)", other.file, other.node.key.Line)})
				continue
			}
			tools[name] = sourceTool{ft: dec.doc.Tools[name], file: src.Name, node: node, dec: dec}
		}
		for _, name := range dec.hookOrder {
			node := dec.hooks[name]
			if other, dup := hooks[name]; dup {
				probs = append(probs, Problem{File: src.Name, Line: node.key.Line, Field: "webhooks." + name,
					Msg: fmt.Sprintf("also defined in %s (line %d)", other.file, other.key.Line)})
				continue
			}
			hooks[name] = sourceWebhook{fw: dec.doc.Webhooks[name], file: src.Name, key: node.key, node: node.value, dec: dec}
		}
	}
	if len(tools) == 0 && len(probs) == 0 {
		probs = append(probs, Problem{Field: "tools", Msg: "at least one tool is required"})
	}
	reg := &Registry{tools: map[string]*Tool{}, webhooks: map[string]*Webhook{}}
	for name, f := range tools {
		if !toolName.MatchString(name) {
			probs = append(probs, Problem{File: f.file, Line: f.node.key.Line, Tool: name,
				Msg: "a tool name must be lower-case letters, digits and _, start with a letter and be at most 64 long (" + toolName.String() + ")"})
			continue
		}
		t, tp := f.ft.compile(name, opts)
		for _, pr := range tp {
			if shadowed(pr.Field, f.dec.shadow[name]) {
				continue // the decoder already reported this field
			}
			pr.File, pr.Line = f.file, fieldLine(f.node, pr.Field)
			probs = append(probs, pr)
		}
		if len(tp) == 0 {
			reg.tools[name] = t
			reg.names = append(reg.names, name)
		}
	}
	probs = append(probs, compensationProblems(tools)...)
	for name, sw := range hooks {
		w, wp := compileWebhook(name, sw, tools)
		probs = append(probs, wp...)
		if len(wp) == 0 {
			reg.webhooks[name] = w
		}
	}
	probs = append(probs, guardProblems(tools)...)
	if len(probs) > 0 {
		sort.SliceStable(probs, func(i, j int) bool {
			a, b := probs[i], probs[j]
			if fa, fb := fileOrder[a.File], fileOrder[b.File]; fa != fb {
				return fa < fb
			}
			if a.Line != b.Line {
				return a.Line < b.Line
			}
			if a.Tool != b.Tool {
				return a.Tool < b.Tool
			}
			return a.Field < b.Field
		})
		return nil, &LoadError{Problems: probs}
	}
	sort.Strings(reg.names)
	return reg, nil
}

// sourceTool is a tool as decoded from its source, before compiling.
type sourceTool struct {
	ft   *fileTool
	file string // the source's name
	node toolNode
	dec  *decoded
}

// compensationProblems checks the playbooks across tools: each names a tool
// of the registry, and only that tool's arguments.
func compensationProblems(tools map[string]sourceTool) []Problem {
	var probs []Problem
	for name, f := range tools {
		if f.ft == nil || f.ft.Compensation == nil || f.ft.Compensation.Tool == "" {
			continue
		}
		c := f.ft.Compensation
		target, ok := tools[c.Tool]
		if !ok {
			probs = append(probs, Problem{File: f.file, Line: fieldLine(f.node, "compensation.tool"), Tool: name,
				Field: "compensation.tool", Msg: fmt.Sprintf("names unregistered tool %q", c.Tool)})
			continue
		}
		if target.ft == nil || target.ft.ArgsSchema == nil {
			continue // its own problem says why
		}
		for _, arg := range sortedKeys(c.Args) {
			if !schemaHasField(target.ft.ArgsSchema, arg, "") {
				field := "compensation.args." + arg
				probs = append(probs, Problem{File: f.file, Line: fieldLine(f.node, field), Tool: name, Field: field,
					Msg: fmt.Sprintf("tool %s has no argument %s in its args_schema", c.Tool, arg)})
			}
			// A sensitive value handed on stays sensitive.
			for _, s := range f.ft.Sensitive {
				if strings.Contains(c.Args[arg], "{"+s+"}") && !slices.Contains(target.ft.Sensitive, arg) {
					field := "compensation.args." + arg
					probs = append(probs, Problem{File: f.file, Line: fieldLine(f.node, field), Tool: name, Field: field,
						Msg: fmt.Sprintf("carries sensitive argument %s to tool %s, whose %s is not sensitive", s, c.Tool, arg)})
				}
			}
		}
	}
	return probs
}

// guardProblems checks the guards' limits across tools: a total_at_most
// limit names a tool of the registry and one of its integer arguments, or
// every call of the guarded tool would be refused.
func guardProblems(tools map[string]sourceTool) []Problem {
	var probs []Problem
	for name, f := range tools {
		if f.ft == nil {
			continue
		}
		for i, g := range f.ft.Guards {
			if g.Kind != GuardTotalAtMost || g.Limit == nil || g.Limit.Tool == "" || g.Limit.Field == "" {
				continue // compile reports what is missing
			}
			field := fmt.Sprintf("guards.%d.limit", i)
			target, ok := tools[g.Limit.Tool]
			switch {
			case !ok:
				probs = append(probs, Problem{File: f.file, Line: fieldLine(f.node, field+".tool"), Tool: name, Field: field + ".tool",
					Msg: fmt.Sprintf("names unregistered tool %q", g.Limit.Tool)})
			case target.ft == nil || target.ft.ArgsSchema == nil:
				// its own problem says why
			case !schemaHasField(target.ft.ArgsSchema, g.Limit.Field, "integer"):
				probs = append(probs, Problem{File: f.file, Line: fieldLine(f.node, field+".field"), Tool: name, Field: field + ".field",
					Msg: fmt.Sprintf("must name an integer argument of tool %s, %q is not one", g.Limit.Tool, g.Limit.Field)})
			}
		}
	}
	return probs
}

// shadowed reports whether field is one of fields or inside one ("" is the
// whole tool).
func shadowed(field string, fields []string) bool {
	for _, f := range fields {
		if f == "" || field == f || strings.HasPrefix(field, f+".") || strings.HasPrefix(field, f+"[") {
			return true
		}
	}
	return false
}

// fieldLine is the line where a tool's field is written: the deepest key
// of its dotted path found in the file, else the tool's name.
func fieldLine(tn toolNode, field string) int {
	line := tn.key.Line
	n := resolve(tn.value)
	if field == "" {
		return line
	}
	for _, seg := range strings.Split(field, ".") {
		if n != nil && n.Kind == yaml.SequenceNode {
			// guards.1.limit: an element of a list
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(n.Content) {
				break
			}
			n = resolve(n.Content[i])
			line = n.Line
			continue
		}
		if n == nil || n.Kind != yaml.MappingNode {
			break
		}
		e, ok := lookupKey(n, seg) // a key may hold brackets: metadata[order_id]
		if !ok {
			name, _, _ := strings.Cut(seg, "[") // or they index a list: pending_values[2]
			if e, ok = lookupKey(n, name); !ok {
				break
			}
		}
		line = e.key.Line
		n = resolve(e.value)
	}
	return line
}
