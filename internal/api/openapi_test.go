package api_test

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/opledger/opledger/docs"
	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
)

// spec is docs/openapi.yaml, read for tests: the routes it describes and
// the schemas of its responses, compiled with a JSON Schema 2020-12
// compiler (OpenAPI 3.1's dialect).
type spec struct {
	doc      map[string]any
	compiler *jsonschema.Compiler
	schemas  map[string]*jsonschema.Schema
}

const specURL = "https://opledger.invalid/openapi.json"

func loadSpec(t *testing.T) *spec {
	t.Helper()
	var y any
	require.NoError(t, yaml.Unmarshal(docs.OpenAPI, &y))
	// Through JSON, so that numbers and maps are what the validator expects.
	js, err := json.Marshal(y)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(js))
	require.NoError(t, err)
	c := jsonschema.NewCompiler()
	c.AssertFormat()
	require.NoError(t, c.AddResource(specURL, doc))
	s := &spec{doc: doc.(map[string]any), compiler: c, schemas: map[string]*jsonschema.Schema{}}
	require.Equal(t, "3.1.0", s.doc["openapi"])
	return s
}

// obj walks the document along keys.
func obj(t *testing.T, v any, keys ...string) map[string]any {
	t.Helper()
	for _, k := range keys {
		m, ok := v.(map[string]any)
		require.True(t, ok, "%s: not an object", k)
		v = m[k]
	}
	m, ok := v.(map[string]any)
	require.True(t, ok, "%v: not an object", keys)
	return m
}

// routes is every "METHOD path" the document describes.
func (s *spec) routes(t *testing.T) []string {
	var out []string
	for path, item := range obj(t, s.doc, "paths") {
		for method := range item.(map[string]any) {
			if method == "parameters" {
				continue
			}
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	sort.Strings(out)
	return out
}

// response returns the documented response of a route for a status, or nil.
func (s *spec) response(t *testing.T, method, path string, status int) map[string]any {
	t.Helper()
	resps := obj(t, s.doc, "paths", path, strings.ToLower(method), "responses")
	r, ok := resps[strconv.Itoa(status)].(map[string]any)
	if !ok {
		return nil
	}
	if ref, ok := r["$ref"].(string); ok {
		name := strings.TrimPrefix(ref, "#/components/responses/")
		r = obj(t, s.doc, "components", "responses", name)
	}
	return r
}

// schema compiles a schema of components/schemas.
func (s *spec) schema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	if sch, ok := s.schemas[name]; ok {
		return sch
	}
	sch, err := s.compiler.Compile(specURL + "#/components/schemas/" + name)
	require.NoError(t, err, name)
	s.schemas[name] = sch
	return sch
}

// check validates a real answer of the server against the document: the
// status must be documented for the route, and a JSON body must satisfy
// the documented schema.
func (s *spec) check(t *testing.T, method, path string, status int, contentType string, body []byte) {
	t.Helper()
	r := s.response(t, method, path, status)
	require.NotNil(t, r, "%s %s answered %d, which the document does not describe: %s", method, path, status, body)
	content := obj(t, r, "content")
	media := strings.TrimSpace(strings.Split(contentType, ";")[0])
	mt, ok := content[media].(map[string]any)
	require.True(t, ok, "%s %s %d: content type %q is not documented", method, path, status, contentType)
	if media != "application/json" {
		return
	}
	ref, _ := obj(t, mt, "schema")["$ref"].(string)
	require.NotEmpty(t, ref, "%s %s %d: the schema is a $ref", method, path, status)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	require.NoError(t, err, "%s %s %d: %s", method, path, status, body)
	name := strings.TrimPrefix(ref, "#/components/schemas/")
	require.NoError(t, s.schema(t, name).Validate(v), "%s %s %d: the answer does not match %s:\n%s", method, path, status, name, body)
}

// operational are the routes every process's HTTP server serves besides
// the API (internal/app), and the dev stack's vendor statistics.
var operational = []string{"GET /healthz", "GET /readyz", "GET /metrics", "GET /v1/vendors/stats"}

// The document describes exactly the routes the server serves: each route
// the API mounts is served under the very pattern the document names, and
// each route the document names is mounted (or is one of the operational
// routes, which the stack tests call over HTTP).
func TestDocumentDescribesEveryRoute(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	a, err := api.New(api.Config{Ops: ops.New(nil, nil)})
	require.NoError(t, err)
	mux := http.NewServeMux()
	a.Mount(mux)
	mountIntents(t, a, mux)

	var mounted []string
	for _, rt := range allRoutes() {
		mounted = append(mounted, rt.Pattern())
		req := httptest.NewRequest(rt.Method, strings.ReplaceAll(rt.Path, "{id}", "op_01ABC"), nil)
		_, pattern := mux.Handler(req)
		require.Equal(t, rt.Pattern(), pattern, "the mux serves %s under another pattern", rt.Pattern())
		_, hasSec := obj(t, s.doc, "paths", rt.Path, strings.ToLower(rt.Method))["security"]
		require.False(t, hasSec, "%s needs the document's bearer security", rt.Pattern())
	}
	want := append(mounted, operational...)
	sort.Strings(want)
	require.Equal(t, want, s.routes(t), "routes in the document and routes served")

	// Of the operational routes only liveness is open.
	for _, route := range operational {
		method, path, _ := strings.Cut(route, " ")
		sec, hasSec := obj(t, s.doc, "paths", path, strings.ToLower(method))["security"]
		if path == "/healthz" {
			require.True(t, hasSec, "liveness needs no credential")
			require.Empty(t, sec)
		} else {
			require.False(t, hasSec, "%s needs the document's bearer security", route)
		}
	}

	// An undocumented method on a documented path is not served.
	req := httptest.NewRequest(http.MethodDelete, "/v1/operations/op_01ABC", nil)
	_, pattern := mux.Handler(req)
	require.Empty(t, pattern)

	require.Equal(t, []any{map[string]any{"bearer": []any{}}}, s.doc["security"])
	scheme := obj(t, s.doc, "components", "securitySchemes", "bearer")
	require.Equal(t, "http", scheme["type"])
	require.Equal(t, "bearer", scheme["scheme"])

	// Every error code the server can send is documented, and no other.
	codes := obj(t, s.doc, "components", "schemas", "Error", "properties", "error", "properties", "code")["enum"].([]any)
	var got []string
	for _, c := range codes {
		got = append(got, c.(string))
	}
	wantCodes := []string{api.CodeInvalid, api.CodeUnauthenticated, api.CodeForbidden, api.CodeNotFound, api.CodeConflict,
		api.CodeState, api.CodeTooLarge, api.CodeUnavailable, api.CodeInternal}
	slices.Sort(got)
	slices.Sort(wantCodes)
	require.Equal(t, wantCodes, got)

	// Every schema compiles.
	for name := range obj(t, s.doc, "components", "schemas") {
		s.schema(t, name)
	}
}

// The document is served as it is in the repository, to a token of any
// role (metrics included) and to no one without one; an API without tokens
// answers every route 503, never open. Breaking it: the document served
// without a credential (every endpoint but liveness needs one).
func TestDocumentServedAndNoTokensIsUnavailable(t *testing.T) {
	t.Parallel()
	s := loadSpec(t)
	token, entry, err := api.GenerateToken("scraper", ops.RoleMetrics)
	require.NoError(t, err)
	tokens, err := api.NewTokens([]api.TokenEntry{entry})
	require.NoError(t, err)
	with, err := api.New(api.Config{Ops: ops.New(nil, nil), Tokens: tokens})
	require.NoError(t, err)
	wmux := http.NewServeMux()
	with.Mount(wmux)
	wsrv := httptest.NewServer(wmux)
	t.Cleanup(wsrv.Close)
	get := func(auth string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, wsrv.URL+"/v1/openapi.yaml", nil)
		require.NoError(t, err)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		return resp
	}
	resp := get("Bearer " + token)
	body := readAll(t, resp)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, docs.OpenAPI, body)
	s.check(t, "GET", "/v1/openapi.yaml", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	resp = get("")
	body = readAll(t, resp)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	s.check(t, "GET", "/v1/openapi.yaml", resp.StatusCode, resp.Header.Get("Content-Type"), body)
	// The metrics role reads no operation.
	req, err := http.NewRequest(http.MethodGet, wsrv.URL+"/v1/operations", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	body = readAll(t, resp)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s", body)
	s.check(t, "GET", "/v1/operations", resp.StatusCode, resp.Header.Get("Content-Type"), body)

	a, err := api.New(api.Config{Ops: ops.New(nil, nil)})
	require.NoError(t, err)
	mux := http.NewServeMux()
	a.Mount(mux)
	mountIntents(t, a, mux)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	for _, rt := range allRoutes() {
		req, err := http.NewRequest(rt.Method, srv.URL+strings.ReplaceAll(rt.Path, "{id}", "op_01ABC"), strings.NewReader(`{"reason":"x"}`))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer whatever")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		body := readAll(t, resp)
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, rt.Pattern())
		require.Contains(t, string(body), "no API tokens configured")
		s.check(t, rt.Method, rt.Path, resp.StatusCode, resp.Header.Get("Content-Type"), body)
	}
}

func readAll(t *testing.T, resp *http.Response) []byte {
	t.Helper()
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return data
}
