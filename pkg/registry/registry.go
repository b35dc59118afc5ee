// Package registry loads the operator's tool registry: for each tool its
// side-effect class, argument schema, idempotency key template, entity
// reference, timeout, retry policy, lease and approval rules, semantic dedupe
// window, adapter settings and compensation playbook.
//
// The registry is the only authority on how a tool may be executed. Hints
// from outside (an MCP client's annotations, a model's claims) never override
// it. Loading validates everything and reports every problem with the tool
// and field; a registry with problems is never returned.
package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/pkg/adapter"
	"github.com/opledger/opledger/pkg/adapter/httpadapter"
	"github.com/opledger/opledger/pkg/canon"
	"github.com/opledger/opledger/pkg/op"
)

// Registry is a validated set of tools. It is immutable and safe for concurrent use.
type Registry struct {
	tools map[string]*Tool
	names []string
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
	ArgsSchema   json.RawMessage
	Timeout      time.Duration
	Retry        RetryPolicy
	Lease        LeasePolicy
	Approval     ApprovalRule
	Dedupe       DedupeWindow
	Adapter      AdapterSpec
	Compensation *Compensation
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
	// passed since the operation (or its reopened generation) began; 0 is
	// no bound besides MaxAttempts.
	MaxElapsed time.Duration
}

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
}

// DedupeWindow is policy-level duplicate suppression beyond the key: within
// Window, a second operation whose KeyTemplate renders the same is suppressed.
type DedupeWindow struct {
	Window time.Duration
	key    *canon.Template
}

// AdapterSpec selects and configures the adapter.
type AdapterSpec struct {
	// Type is "http", the generic HTTP adapter (the only one so far).
	Type string
	// Vendor names the base URL the HTTP adapter's path is joined to.
	Vendor string
	HTTP   httpadapter.Config
	// VendorIdempotency says the vendor deduplicates by our key (so an
	// ambiguous attempt may be re-sent under the same key).
	VendorIdempotency bool
}

// Compensation is the approved playbook for undoing an operation: another
// tool, with args rendered from the original's canonical args and external ids.
type Compensation struct {
	Tool string
	// Args maps each compensation argument to a template over the original
	// operation: {field} of its args, {external_object_id}, {operation_id}.
	Args map[string]string
}

// NewAdapter builds the tool's adapter over client (nil: a default client).
func (t *Tool) NewAdapter(client *http.Client) (adapter.Adapter, error) {
	a, err := httpadapter.New(t.Adapter.HTTP, client)
	if err != nil {
		return nil, fmt.Errorf("tool %s: adapter: %w", t.Name, err)
	}
	return a, nil
}

// Adapters builds every tool's adapter, keyed by tool name.
func (r *Registry) Adapters(client *http.Client) (map[string]adapter.Adapter, error) {
	out := make(map[string]adapter.Adapter, len(r.tools))
	for name, t := range r.tools {
		a, err := t.NewAdapter(client)
		if err != nil {
			return nil, err
		}
		out[name] = a
	}
	return out, nil
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

// Problem is one thing wrong with a registry.
type Problem struct {
	Tool  string // "" for the document itself
	Field string
	Msg   string
}

func (p Problem) String() string {
	switch {
	case p.Tool == "":
		return p.Field + ": " + p.Msg
	case p.Field == "":
		return "tool " + p.Tool + ": " + p.Msg
	}
	return "tool " + p.Tool + ": " + p.Field + ": " + p.Msg
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
	// Secret resolves ${NAME} references in adapter header values; nil makes
	// any such reference a problem.
	Secret func(name string) (string, bool)
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

// LoadFile reads and validates a registry file.
func LoadFile(path string, opts Options) (*Registry, error) {
	return LoadPaths([]string{path}, opts)
}

var toolName = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)

// Load parses and validates a registry document. All problems are reported
// together in a *LoadError.
func Load(data []byte, opts Options) (*Registry, error) {
	return LoadSources([]Source{{Data: data}}, opts)
}

// LoadSources parses and validates a registry made of several documents:
// together they define the tools, and a tool defined in two of them is a
// problem. All problems are reported together in a *LoadError.
func LoadSources(srcs []Source, opts Options) (*Registry, error) {
	var probs []Problem
	tools := map[string]*fileTool{}
	from := map[string]string{}
	for _, src := range srcs {
		prefix := ""
		if src.Name != "" && len(srcs) > 1 {
			prefix = src.Name + ": "
		}
		var doc fileDoc
		dec := yaml.NewDecoder(bytes.NewReader(src.Data))
		dec.KnownFields(true)
		if err := dec.Decode(&doc); err != nil {
			probs = append(probs, Problem{Field: prefix + "document", Msg: yamlMessage(err)})
			continue
		}
		if doc.Version != 1 {
			probs = append(probs, Problem{Field: prefix + "version", Msg: fmt.Sprintf("must be 1, got %d", doc.Version)})
		}
		for name, ft := range doc.Tools {
			if other, dup := from[name]; dup {
				probs = append(probs, Problem{Tool: name, Msg: fmt.Sprintf("defined in both %s and %s", other, src.Name)})
				continue
			}
			tools[name], from[name] = ft, src.Name
		}
	}
	if len(tools) == 0 && len(probs) == 0 {
		probs = append(probs, Problem{Field: "tools", Msg: "at least one tool is required"})
	}
	reg := &Registry{tools: map[string]*Tool{}}
	for name, ft := range tools {
		if !toolName.MatchString(name) {
			probs = append(probs, Problem{Tool: name, Msg: "name must match " + toolName.String()})
			continue
		}
		t, tp := ft.compile(name, opts)
		probs = append(probs, tp...)
		if len(tp) == 0 {
			reg.tools[name] = t
			reg.names = append(reg.names, name)
		}
	}
	// Compensation playbooks must name a registered tool.
	for name, ft := range tools {
		if ft != nil && ft.Compensation != nil {
			if _, ok := tools[ft.Compensation.Tool]; !ok {
				probs = append(probs, Problem{Tool: name, Field: "compensation.tool",
					Msg: fmt.Sprintf("names unregistered tool %q", ft.Compensation.Tool)})
			}
		}
	}
	if len(probs) > 0 {
		sort.SliceStable(probs, func(i, j int) bool {
			if probs[i].Tool != probs[j].Tool {
				return probs[i].Tool < probs[j].Tool
			}
			return probs[i].Field < probs[j].Field
		})
		return nil, &LoadError{Problems: probs}
	}
	sort.Strings(reg.names)
	return reg, nil
}

func yamlMessage(err error) string {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return strings.Join(te.Errors, "; ")
	}
	return err.Error()
}
