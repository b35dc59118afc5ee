package wire

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"sync"
)

// The strict checks (checkValue, strictObject) read a message through
// encoding/json's Token, which allocates for every token: on a busy
// dispatcher or client, reading results and commands that way cost more
// than decoding them. quickValue and quickObject check the same rules
// in one pass over the bytes without allocating, for the messages that
// keep them, which is nearly all of them. They answer true only when the
// slow check would pass; false means "look closer", and the slow check
// then decides and says why, so that every refusal reads as before. They
// give up (false) on anything unusual: bytes that are not valid JSON, a
// key written with escapes.

// quickValue reports whether data, one JSON value, keeps checkValue's rules
// for the Go type t: no key twice in any object, and no key of a struct's
// object that matches one of its fields only ignoring case.
func quickValue(data []byte, t reflect.Type) bool {
	if !json.Valid(data) {
		return false
	}
	s := scan{b: data}
	s.ws()
	return s.value(t) && s.end()
}

// NoRepeatedKeys reports whether data is one valid JSON value in which no
// object has a key twice, every key written without escapes, in one pass
// that allocates nothing: a reader that refuses repeated keys (a vendor's
// answer, whose {"status":"failed","status":"succeeded"} encoding/json
// would read as a success) may then decode data with encoding/json. False
// does not say that a key repeats: a key written with an escape is not
// read here, and the reader decides such a value the slow way.
func NoRepeatedKeys(data []byte) bool { return quickValue(data, nil) }

// quickObject reports whether body keeps strictObject's rules: one object
// whose keys are all in fields (nil: any), none twice; the nested objects
// named in nested keep their own lists; no key twice anywhere inside.
func quickObject(body []byte, fields []string, nested map[string][]string) bool {
	if !json.Valid(body) {
		return false
	}
	s := scan{b: body}
	s.ws()
	return s.object(fields, nested) && s.end()
}

// scan walks bytes already known to be one valid JSON value.
type scan struct {
	b []byte
	i int
}

func (s *scan) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

func (s *scan) end() bool {
	s.ws()
	return s.i == len(s.b)
}

func (s *scan) peek() byte {
	if s.i < len(s.b) {
		return s.b[s.i]
	}
	return 0
}

// str reads the string at s.i and returns its bytes between the quotes, and
// whether they hold an escape (and so are not the string itself).
func (s *scan) str() (raw []byte, escaped, ok bool) {
	if s.peek() != '"' {
		return nil, false, false
	}
	s.i++
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case '\\':
			escaped = true
			s.i += 2
		case '"':
			raw = s.b[start:s.i]
			s.i++
			return raw, escaped, true
		default:
			s.i++
		}
	}
	return nil, false, false
}

// key reads an object's key and the colon after it. A key written with an
// escape is not read here (its value is not its bytes): ok is false.
func (s *scan) key() (k []byte, ok bool) {
	s.ws()
	k, escaped, ok := s.str()
	if !ok || escaped {
		return nil, false
	}
	s.ws()
	if s.peek() != ':' {
		return nil, false
	}
	s.i++
	s.ws()
	return k, true
}

// next moves past the comma between members or elements, and reports
// whether another one follows (false at the closing bracket, which it
// consumes).
func (s *scan) next(closing byte) (more, ok bool) {
	s.ws()
	switch s.peek() {
	case ',':
		s.i++
		s.ws()
		return true, true
	case closing:
		s.i++
		return false, true
	}
	return false, false
}

// keys remembers the keys of one object, to refuse a repeat; small objects
// need no map.
type keys struct {
	few  [16][]byte
	n    int
	many map[string]bool
}

// add reports whether k is new.
func (ks *keys) add(k []byte) bool {
	if ks.many != nil {
		if ks.many[string(k)] {
			return false
		}
		ks.many[string(k)] = true
		return true
	}
	for _, seen := range ks.few[:ks.n] {
		if bytes.Equal(seen, k) {
			return false
		}
	}
	if ks.n < len(ks.few) {
		ks.few[ks.n] = k
		ks.n++
		return true
	}
	ks.many = make(map[string]bool, 2*len(ks.few))
	for _, seen := range ks.few[:ks.n] {
		ks.many[string(seen)] = true
	}
	ks.many[string(k)] = true
	return true
}

// members walks an object at s.i ('{'), calling member for each key with
// s.i at its value; member must read the value.
func (s *scan) members(member func(k []byte) bool) bool {
	if s.peek() != '{' {
		return false
	}
	s.i++
	s.ws()
	if s.peek() == '}' {
		s.i++
		return true
	}
	var seen keys
	for {
		k, ok := s.key()
		if !ok || !seen.add(k) || !member(k) {
			return false
		}
		more, ok := s.next('}')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// elements walks an array at s.i ('['), calling element with s.i at each.
func (s *scan) elements(element func() bool) bool {
	s.i++ // '['
	s.ws()
	if s.peek() == ']' {
		s.i++
		return true
	}
	for {
		if !element() {
			return false
		}
		more, ok := s.next(']')
		if !ok {
			return false
		}
		if !more {
			return true
		}
	}
}

// skip reads any value, refusing a repeated key in any object inside it.
func (s *scan) skip() bool {
	switch s.peek() {
	case '{':
		return s.members(func([]byte) bool { return s.skip() })
	case '[':
		return s.elements(s.skip)
	case '"':
		_, _, ok := s.str()
		return ok
	}
	// A number, true, false or null: up to the next delimiter.
	start := s.i
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ']', ' ', '\t', '\n', '\r':
			return s.i > start
		}
		s.i++
	}
	return s.i > start
}

// object is strictObject's walk of the object at s.i.
func (s *scan) object(fields []string, nested map[string][]string) bool {
	return s.members(func(k []byte) bool {
		if fields != nil && !containsBytes(fields, k) {
			return false
		}
		if sub, ok := nested[string(k)]; ok {
			s.ws()
			return s.object(sub, nil)
		}
		return s.skip()
	})
}

func containsBytes(xs []string, k []byte) bool {
	for _, x := range xs {
		if x == string(k) {
			return true
		}
	}
	return false
}

// value is checkValue's walk of the value at s.i for the Go type t.
func (s *scan) value(t reflect.Type) bool {
	ti := typeInfoOf(t)
	switch s.peek() {
	case '{':
		return s.members(func(k []byte) bool {
			sub := ti.elem
			if ti.fields != nil {
				var known bool
				if sub, known = ti.fields[string(k)]; !known && ti.foldsTo(k) {
					return false
				}
			}
			s.ws()
			return s.value(sub)
		})
	case '[':
		return s.elements(func() bool { return s.value(ti.elem) })
	}
	return s.skip()
}

// typeInfo is what checkValue derives from a Go type, kept per type.
type typeInfo struct {
	// fields maps a struct's JSON names to their types (nil: not a struct,
	// or one that decodes itself).
	fields map[string]reflect.Type
	// elem is a map's, slice's or array's element type.
	elem reflect.Type
}

// foldsTo reports whether k matches one of the fields only ignoring case.
func (ti *typeInfo) foldsTo(k []byte) bool {
	for f := range ti.fields {
		if strings.EqualFold(f, string(k)) {
			return true
		}
	}
	return false
}

var typeInfos sync.Map // reflect.Type → *typeInfo

var noTypeInfo = &typeInfo{}

func typeInfoOf(t reflect.Type) *typeInfo {
	if t == nil {
		return noTypeInfo
	}
	if ti, ok := typeInfos.Load(t); ok {
		return ti.(*typeInfo)
	}
	ti := &typeInfo{}
	u := t
	for u.Kind() == reflect.Pointer {
		u = u.Elem()
	}
	selfDecoding := u != rawMessageType && (reflect.PointerTo(u).Implements(unmarshalerType) || reflect.PointerTo(u).Implements(textUnmarshaler))
	if !selfDecoding && u != rawMessageType {
		switch u.Kind() {
		case reflect.Struct:
			ti.fields = jsonFields(u)
		case reflect.Map, reflect.Slice, reflect.Array:
			ti.elem = u.Elem()
		}
	}
	v, _ := typeInfos.LoadOrStore(t, ti)
	return v.(*typeInfo)
}
