package canon

import "time"

// canonicalDateTime parses an RFC 3339 date-time (section 5.6: full-date "T"
// full-time, "T" and "Z" in either case, fractional seconds of 1 to 9 digits,
// offset Z or ±hh:mm) and returns it in UTC as time.RFC3339Nano formats it:
// trailing zeros of the fraction trimmed, no fraction when it is zero. Leap
// seconds (:60) and instants whose UTC year is outside 0000..9999 are
// rejected.
func canonicalDateTime(s string) (string, bool) {
	if !rfc3339Syntax(s) {
		return "", false
	}
	b := []byte(s)
	b[10] = 'T'
	if n := len(b) - 1; b[n] == 'z' {
		b[n] = 'Z'
	}
	t, err := time.Parse(time.RFC3339Nano, string(b))
	if err != nil {
		return "", false
	}
	t = t.UTC()
	if t.Year() < 0 || t.Year() > 9999 {
		return "", false
	}
	return t.Format(time.RFC3339Nano), true
}

// rfc3339Syntax checks the shape that time.Parse is laxer about: a '.'
// before 1-9 fraction digits and an offset within ±23:59.
func rfc3339Syntax(s string) bool {
	// 2006-01-02T15:04:05
	const head = "dddd-dd-ddTdd:dd:dd"
	if len(s) < len(head)+1 {
		return false
	}
	for i := 0; i < len(head); i++ {
		c := s[i]
		switch head[i] {
		case 'd':
			if c < '0' || c > '9' {
				return false
			}
		case 'T':
			if c != 'T' && c != 't' {
				return false
			}
		default:
			if c != head[i] {
				return false
			}
		}
	}
	rest := s[len(head):]
	if rest[0] == '.' {
		n := 1
		for n < len(rest) && rest[n] >= '0' && rest[n] <= '9' {
			n++
		}
		if n == 1 || n > 10 {
			return false
		}
		rest = rest[n:]
	}
	switch {
	case rest == "Z" || rest == "z":
		return true
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		for _, i := range []int{1, 2, 4, 5} {
			if rest[i] < '0' || rest[i] > '9' {
				return false
			}
		}
		hourOK := rest[1] < '2' || (rest[1] == '2' && rest[2] < '4')
		return hourOK && rest[4] < '6'
	}
	return false
}
