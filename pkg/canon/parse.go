package canon

import (
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Number is the exact decimal text of a JSON number. In values returned by
// this package it is in canonical form (see the package documentation). It is
// json.Number, so it marshals as a number and offers Int64 and Float64.
type Number = json.Number

// MaxDepth is the deepest nesting of objects and arrays accepted.
const MaxDepth = 256

// parser is a strict RFC 8259 parser. It keeps number literals as text,
// rejects duplicate keys (compared after NFC), invalid UTF-8, lone surrogate
// escapes and trailing data, and NFC-normalizes object keys.
type parser struct {
	data  []byte
	pos   int
	path  []string
	depth int
}

// parse decodes one JSON value. Numbers are returned as their literal text
// (not yet canonical); object keys are NFC; string values are as written.
func parse(data []byte) (any, error) {
	p := &parser{data: data}
	p.skipSpace()
	v, err := p.value()
	if err != nil {
		return nil, err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return nil, p.fail("unexpected data after the JSON value at byte %d", p.pos)
	}
	return v, nil
}

func (p *parser) fail(format string, args ...any) *FieldError {
	return fieldErr(p.path, "invalid JSON: "+fmt.Sprintf(format, args...))
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

// unexpected describes the byte at p.pos without echoing input beyond it.
func (p *parser) unexpected() *FieldError {
	if p.pos >= len(p.data) {
		return p.fail("unexpected end of input")
	}
	c := p.data[p.pos]
	if c > ' ' && c < 0x7f {
		return p.fail("unexpected character %q at byte %d", rune(c), p.pos)
	}
	return p.fail("unexpected byte 0x%02x at byte %d", c, p.pos)
}

func (p *parser) value() (any, error) {
	if p.pos >= len(p.data) {
		return nil, p.unexpected()
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return p.object()
	case c == '[':
		return p.array()
	case c == '"':
		return p.str()
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == 't':
		return true, p.literal("true")
	case c == 'f':
		return false, p.literal("false")
	case c == 'n':
		return nil, p.literal("null")
	}
	return nil, p.unexpected()
}

func (p *parser) literal(word string) error {
	if len(p.data)-p.pos < len(word) || string(p.data[p.pos:p.pos+len(word)]) != word {
		return p.fail("invalid literal at byte %d", p.pos)
	}
	p.pos += len(word)
	return nil
}

func (p *parser) enter() error {
	p.depth++
	if p.depth > MaxDepth {
		return p.fail("nesting deeper than %d levels", MaxDepth)
	}
	return nil
}

func (p *parser) object() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // {
	obj := map[string]any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.depth--
		return obj, nil
	}
	for {
		if p.pos >= len(p.data) || p.data[p.pos] != '"' {
			return nil, p.unexpected()
		}
		raw, err := p.str()
		if err != nil {
			return nil, err
		}
		key := norm.NFC.String(raw)
		p.path = append(p.path, key)
		if _, dup := obj[key]; dup {
			reason := "duplicate key"
			if key != raw {
				reason += " (keys are compared after Unicode NFC normalization)"
			}
			return nil, fieldErr(p.path, reason)
		}
		p.skipSpace()
		if p.pos >= len(p.data) || p.data[p.pos] != ':' {
			return nil, p.unexpected()
		}
		p.pos++
		p.skipSpace()
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		obj[key] = v
		p.path = p.path[:len(p.path)-1]
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.unexpected()
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case '}':
			p.pos++
			p.depth--
			return obj, nil
		default:
			return nil, p.unexpected()
		}
	}
}

func (p *parser) array() (any, error) {
	if err := p.enter(); err != nil {
		return nil, err
	}
	p.pos++ // [
	arr := []any{}
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.depth--
		return arr, nil
	}
	for {
		p.path = append(p.path, strconv.Itoa(len(arr)))
		v, err := p.value()
		if err != nil {
			return nil, err
		}
		arr = append(arr, v)
		p.path = p.path[:len(p.path)-1]
		p.skipSpace()
		if p.pos >= len(p.data) {
			return nil, p.unexpected()
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.skipSpace()
		case ']':
			p.pos++
			p.depth--
			return arr, nil
		default:
			return nil, p.unexpected()
		}
	}
}

// str decodes a string starting at the opening quote.
func (p *parser) str() (string, error) {
	p.pos++ // "
	start := p.pos
	var buf []byte // nil until the first escape
	for {
		if p.pos >= len(p.data) {
			return "", p.fail("unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			s := p.data[start:p.pos]
			p.pos++
			if buf == nil {
				return string(s), nil
			}
			return string(append(buf, s...)), nil
		case c == '\\':
			buf = append(buf, p.data[start:p.pos]...)
			var err error
			if buf, err = p.escape(buf); err != nil {
				return "", err
			}
			start = p.pos
		case c < 0x20:
			return "", p.fail("unescaped control character 0x%02x in string at byte %d", c, p.pos)
		case c < utf8.RuneSelf:
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size == 1 {
				return "", p.fail("invalid UTF-8 at byte %d", p.pos)
			}
			p.pos += size
		}
	}
}

// escape decodes the escape sequence at p.pos (a backslash) onto buf.
func (p *parser) escape(buf []byte) ([]byte, error) {
	at := p.pos
	if p.pos+1 >= len(p.data) {
		return nil, p.fail("unterminated string")
	}
	c := p.data[p.pos+1]
	p.pos += 2
	switch c {
	case '"', '\\', '/':
		return append(buf, c), nil
	case 'b':
		return append(buf, '\b'), nil
	case 'f':
		return append(buf, '\f'), nil
	case 'n':
		return append(buf, '\n'), nil
	case 'r':
		return append(buf, '\r'), nil
	case 't':
		return append(buf, '\t'), nil
	case 'u':
		r, ok := p.hex4()
		if !ok {
			return nil, p.fail("invalid \\u escape at byte %d", at)
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00:
			// A high surrogate must be followed by an escaped low surrogate.
			if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				p.pos += 2
				lo, ok := p.hex4()
				if ok && lo >= 0xdc00 && lo <= 0xdfff {
					return utf8.AppendRune(buf, utf16.DecodeRune(r, lo)), nil
				}
			}
			return nil, p.fail("unpaired UTF-16 surrogate escape at byte %d", at)
		case utf16.IsSurrogate(r):
			return nil, p.fail("unpaired UTF-16 surrogate escape at byte %d", at)
		}
		return utf8.AppendRune(buf, r), nil
	}
	return nil, p.fail("invalid escape at byte %d", at)
}

func (p *parser) hex4() (rune, bool) {
	if len(p.data)-p.pos < 4 {
		return 0, false
	}
	var r rune
	for _, c := range p.data[p.pos : p.pos+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	p.pos += 4
	return r, true
}

// number scans a number literal per RFC 8259 and returns its text.
func (p *parser) number() (any, error) {
	start := p.pos
	if p.data[p.pos] == '-' {
		p.pos++
	}
	switch {
	case p.pos < len(p.data) && p.data[p.pos] == '0':
		p.pos++
	case p.pos < len(p.data) && p.data[p.pos] >= '1' && p.data[p.pos] <= '9':
		p.digits()
	default:
		return nil, p.fail("invalid number at byte %d", start)
	}
	if p.pos < len(p.data) && p.data[p.pos] == '.' {
		p.pos++
		if p.digits() == 0 {
			return nil, p.fail("invalid number at byte %d", start)
		}
	}
	if p.pos < len(p.data) && (p.data[p.pos] == 'e' || p.data[p.pos] == 'E') {
		p.pos++
		if p.pos < len(p.data) && (p.data[p.pos] == '+' || p.data[p.pos] == '-') {
			p.pos++
		}
		if p.digits() == 0 {
			return nil, p.fail("invalid number at byte %d", start)
		}
	}
	return Number(p.data[start:p.pos]), nil
}

func (p *parser) digits() int {
	n := 0
	for p.pos < len(p.data) && p.data[p.pos] >= '0' && p.data[p.pos] <= '9' {
		p.pos++
		n++
	}
	return n
}
