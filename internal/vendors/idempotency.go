package vendors

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"net/http"
)

// idemEntry is what a vendor remembers about an idempotency key: the request
// it came with and the response it gave, replayed byte for byte.
type idemEntry struct {
	hash     [32]byte
	status   int
	body     []byte
	objectID string
}

// requestHash identifies a request for idempotency comparison: the path plus
// the body as normalized JSON (key order and whitespace do not matter).
func requestHash(path string, body []byte) [32]byte {
	var v any
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	norm := body
	if err := dec.Decode(&v); err == nil {
		if b, err := json.Marshal(v); err == nil {
			norm = b
		}
	}
	return hashRequest(path, norm)
}

// hashRequest is requestHash for a body the caller has already normalized.
func hashRequest(path string, norm []byte) [32]byte {
	h := sha256.New()
	h.Write([]byte(path))
	h.Write([]byte{0})
	h.Write(norm)
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// replay answers a request whose idempotency key is known: the stored
// response if the request is the same, conflict if it is not. ok is false
// for an empty or unknown key. The caller holds s.mu.
func (st *state) replay(scope, key string, hash [32]byte, conflict result) (res result, ok bool) {
	if key == "" {
		return result{}, false
	}
	e, ok := st.keys[scope][key]
	if !ok {
		return result{}, false
	}
	if e.hash != hash {
		st.stats.Conflicts++
		return conflict, true
	}
	st.stats.Replays++
	return result{status: e.status, body: e.body, replayed: true}, true
}

// remember stores the response for key (no-op for an empty key). The caller holds s.mu.
func (st *state) remember(scope, key string, hash [32]byte, res result, objectID string) {
	if key == "" {
		return
	}
	m := st.keys[scope]
	if m == nil {
		m = map[string]*idemEntry{}
		st.keys[scope] = m
	}
	m[key] = &idemEntry{hash: hash, status: res.status, body: res.body, objectID: objectID}
}

// lookupKey finds the object stored under an idempotency key; "" if none.
// The caller holds s.mu.
func (st *state) lookupKey(scope, key string) string {
	if e, ok := st.keys[scope][key]; ok {
		return e.objectID
	}
	return ""
}

func jsonResult(status int, v any) result {
	b, err := json.Marshal(v)
	if err != nil { // only our own plain structs are marshalled
		panic(err)
	}
	return result{status: status, body: b}
}

func errorResult(status int, code string) result {
	return jsonResult(status, map[string]string{"error": code})
}

var (
	notFound = errorResult(http.StatusNotFound, "not_found")
	// keyReused answers a known idempotency key sent with another request.
	keyReused = errorResult(http.StatusUnprocessableEntity, "idempotency_key_reused")
)

// decodeJSON decodes a request body into v; false means 400.
func decodeJSON(body []byte, v any) bool {
	return json.Unmarshal(body, v) == nil
}
