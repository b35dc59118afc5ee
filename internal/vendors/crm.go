package vendors

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"
)

// Accounts is read-only; the CRM upserts records and counts only the writes
// that changed something.

// account is GET /v1/accounts/{account_id}. Ids starting with "missing_" do
// not exist (404); ids starting with "closed_" are closed.
func (s *Server) account(r call) result {
	id := r.PathValue("account_id")
	if strings.HasPrefix(id, "missing_") {
		return notFound
	}
	status := "active"
	if strings.HasPrefix(id, "closed_") {
		status = "closed"
	}
	s.mu.Lock()
	s.st.stats.AccountReads++
	s.mu.Unlock()
	return jsonResult(http.StatusOK, map[string]string{"id": id, "status": status})
}

// CRMRecord is a CRM record as the CRM holds it.
type CRMRecord struct {
	ID      string `json:"id"`
	Version int    `json:"version"`
	// Fields are the record's current values, each as JSON.
	Fields map[string]json.RawMessage `json:"fields"`
}

// CRMRecord returns record id as it is now — after the latest write, even
// one that delayed_visibility still hides from GET — and whether it exists.
// The result is a copy.
func (s *Server) CRMRecord(id string) (CRMRecord, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec, ok := s.st.records[id]
	if !ok {
		return CRMRecord{}, false
	}
	fields := make(map[string]json.RawMessage, len(rec.Fields))
	for k, v := range rec.Fields {
		fields[k] = bytes.Clone(v)
	}
	return CRMRecord{ID: rec.ID, Version: rec.Version, Fields: fields}, true
}

// record is one version of a CRM record; a write makes a new one.
type record struct {
	ID      string                     `json:"id"`
	Version int                        `json:"version"`
	Fields  map[string]json.RawMessage `json:"fields"`

	visibleAt time.Time
	// prev is the version this one replaced, kept only while some version
	// from prev on is not yet visible: GET falls back to it.
	prev *record
}

// visibleVersion is the newest version of rec that GET may show; nil if none.
func visibleVersion(rec *record) *record {
	for rec != nil && !visible(rec.visibleAt) {
		rec = rec.prev
	}
	return rec
}

// crmPut is PUT /v1/crm/records/{record_id} with a JSON object body that is
// merged into the record: {"field":F,"value":V} sets field F to V; any other
// object upserts its top-level keys ("record_id" is ignored). A write counts
// only if it changed a value. Idempotency-Key works as for payments.
func (s *Server) crmPut(r call) result {
	var in map[string]any
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.UseNumber()
	if err := dec.Decode(&in); err != nil || in == nil {
		return errorResult(http.StatusBadRequest, "invalid_json")
	}
	set := in
	if f, ok := in["field"].(string); ok && f != "" {
		if v, ok := in["value"]; ok {
			set = map[string]any{f: v}
		}
	}
	delete(set, "record_id")
	id := r.PathValue("record_id")
	key := r.Header.Get("Idempotency-Key")
	hash := requestHash(r.URL.Path, r.body)

	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	if res, ok := st.replay(RouteCRM, key, hash, keyReused); ok {
		return res
	}
	old := st.records[id]
	rec := old
	if rec == nil {
		rec = &record{ID: id, Fields: map[string]json.RawMessage{}}
	}
	changed := old == nil
	next := make(map[string]json.RawMessage, len(rec.Fields)+len(set))
	for k, v := range rec.Fields {
		next[k] = v
	}
	for k, v := range set {
		b, _ := json.Marshal(v) // decoded JSON always re-encodes; maps come out key-sorted
		if !bytes.Equal(next[k], b) {
			next[k] = b
			changed = true
		}
	}
	if changed {
		if old != nil && visible(old.visibleAt) {
			old.prev = nil // GET will never need to look past old
		}
		rec = &record{ID: id, Version: rec.Version + 1, Fields: next, visibleAt: r.visibleAt, prev: old}
		st.records[id] = rec
		st.stats.CRMWrites++
		st.keyedEffect(KindCRM, key, id)
	}
	res := jsonResult(http.StatusOK, struct {
		*record
		Changed bool `json:"changed"`
	}{rec, changed})
	st.remember(RouteCRM, key, hash, res, id)
	return res
}

// crmGet is GET /v1/crm/records/{record_id}: the newest visible version.
func (s *Server) crmGet(r call) result {
	s.mu.Lock()
	defer s.mu.Unlock()
	rec := visibleVersion(s.st.records[r.PathValue("record_id")])
	if rec == nil {
		return notFound
	}
	return jsonResult(http.StatusOK, rec)
}
