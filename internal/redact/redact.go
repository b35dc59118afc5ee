// Package redact keeps credentials out of what opledger prints: connection
// strings (Postgres URLs and keyword/value strings, NATS URLs and lists of
// them) and the error texts of drivers that may quote them.
//
// Every shape that can carry a secret is covered: a password in the user
// information (postgres://u:pw@h, nats://u:pw@h), a user information that is
// itself the secret (nats://TOKEN@h), a password or token in the query
// (?password=…, ?sslpassword=…, ?token=…), and password=… in a keyword/value
// string. What cannot be parsed is not printed at all.
package redact

import (
	"net/url"
	"regexp"
	"slices"
	"strings"
)

// Mask replaces every secret.
const Mask = "***"

// Unparsable stands in for a connection string that could not be parsed:
// it might hold a secret in a place no rule recognises.
const Unparsable = "(unparsable connection string)"

// secretParams are query parameters (and keywords of keyword/value strings)
// whose values are secrets. Matched case-insensitively.
var secretParams = []string{"password", "sslpassword", "pass", "passwd", "pwd", "token", "auth_token", "secret", "api_key", "apikey", "access_token", "nkey", "jwt"}

func secretParam(name string) bool {
	return slices.Contains(secretParams, strings.ToLower(name))
}

// kvRE finds keyword=value pairs of a libpq keyword/value string: the value
// is single-quoted (with \' and \\ escapes) or runs to the next space.
var kvRE = regexp.MustCompile(`(?i)\b([a-z_]+)\s*=\s*('(?:[^'\\]|\\.)*'|[^\s']*)`)

// kvStartRE recognises a keyword/value string: it starts with keyword=.
var kvStartRE = regexp.MustCompile(`^\s*[A-Za-z_]+\s*=`)

func keywordValueString(s string) bool {
	return !strings.Contains(s, "://") && kvStartRE.MatchString(s)
}

// URL returns s with every credential masked. s is a URL, a comma-separated
// list of NATS URLs (with or without a scheme), or a Postgres keyword/value
// string. The user name stays in Postgres URLs, where a lone name is not a
// secret; in every other URL a user information without a password is a
// token and is masked whole.
func URL(s string) string {
	if s == "" {
		return ""
	}
	if keywordValueString(s) {
		return anyAssignment(keywordValue(s))
	}
	parts := strings.Split(s, ",")
	for i, p := range parts {
		parts[i] = one(strings.TrimSpace(p))
	}
	return anyAssignment(strings.Join(parts, ","))
}

// assignRE finds what looks like a secret's assignment anywhere in a
// string that no rule above recognised as a URL or a keyword/value string.
var assignRE = regexp.MustCompile(`(?i)(password|passwd|pwd|token|secret|api_?key|nkey|jwt)(\s*=\s*)('(?:[^'\\]|\\.)*'|[^\s'&,]*)`)

// anyAssignment masks every password=…, token=… and the like left in s:
// the last line of defence for shapes no parser above knows.
func anyAssignment(s string) string {
	return assignRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := assignRE.FindStringSubmatch(m)
		if sub[3] == "" {
			return m
		}
		return sub[1] + sub[2] + Mask
	})
}

func keywordValue(s string) string {
	return kvRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := kvRE.FindStringSubmatch(m)
		if secretParam(sub[1]) {
			return sub[1] + "=" + Mask
		}
		return m
	})
}

func one(p string) string {
	if p == "" {
		return p
	}
	if !strings.Contains(p, "://") {
		if !strings.Contains(p, "@") && !strings.Contains(p, "?") {
			if !hostPort(p) {
				return Unparsable // not a host: perhaps a piece of a credential
			}
			return p
		}
		p = "nats://" + p
	}
	u, err := url.Parse(p)
	if err != nil || (u.User == nil && strings.Contains(p, "@")) {
		// An '@' that is not a user information's end: something the
		// parser read differently from a client. Print nothing of it.
		return Unparsable
	}
	out := u.Scheme + "://"
	if u.User != nil {
		_, hasPw := u.User.Password()
		switch {
		case hasPw:
			out += url.PathEscape(u.User.Username()) + ":" + Mask + "@"
		case postgres(u.Scheme):
			out += url.PathEscape(u.User.Username()) + "@"
		default:
			out += Mask + "@"
		}
	}
	out += u.Host + u.EscapedPath()
	if u.RawQuery != "" {
		out += "?" + query(u.RawQuery)
	}
	if u.Fragment != "" {
		out += "#" + Mask
	}
	return out
}

// hostPort reports whether s can be a bare host[:port] of a NATS list.
func hostPort(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune(".-_:[]", r)) {
			return false
		}
	}
	return true
}

func postgres(scheme string) bool { return scheme == "postgres" || scheme == "postgresql" }

// query masks the values of secret parameters, keeping the others and
// their order as written.
func query(raw string) string {
	pairs := strings.Split(raw, "&")
	for i, kv := range pairs {
		k, _, _ := strings.Cut(kv, "=")
		name, err := url.QueryUnescape(k)
		if err != nil || secretParam(name) {
			pairs[i] = k + "=" + Mask
		}
	}
	return strings.Join(pairs, "&")
}

// Secrets returns the credentials s holds, as they may appear in an error
// text: passwords, tokens, secret query values, both raw and decoded.
func Secrets(s string) []string {
	var out []string
	add := func(v string) {
		if len(v) >= 3 && !slices.Contains(out, v) { // shorter ones would mask ordinary text
			out = append(out, v)
		}
	}
	if keywordValueString(s) {
		for _, m := range kvRE.FindAllStringSubmatch(s, -1) {
			if secretParam(m[1]) {
				add(m[2])
				add(strings.Trim(m[2], "'"))
			}
		}
		return out
	}
	// Every user information as written, list separators and all (a
	// token with a ',' breaks the list apart, not the secret).
	for at := strings.Index(s, "@"); at >= 0; {
		start := strings.LastIndex(s[:at], "://")
		scheme := ""
		if start >= 0 {
			scheme = s[:start]
			if i := strings.LastIndexAny(scheme, ", "); i >= 0 {
				scheme = scheme[i+1:]
			}
			start += 3
		} else {
			start = 0
		}
		ui := s[start:at]
		if _, pw, ok := strings.Cut(ui, ":"); ok {
			add(pw)
			if dec, err := url.PathUnescape(pw); err == nil {
				add(dec)
			}
		} else if !postgres(scheme) {
			add(ui)
			if dec, err := url.PathUnescape(ui); err == nil {
				add(dec)
			}
		}
		next := strings.Index(s[at+1:], "@")
		if next < 0 {
			break
		}
		at += 1 + next
	}
	for p := range strings.SplitSeq(s, ",") {
		p = strings.TrimSpace(p)
		if !strings.Contains(p, "://") {
			p = "nats://" + p
		}
		// The raw user information, before any parsing that may fail.
		if at := strings.LastIndex(p, "@"); at >= 0 {
			ui := p[strings.Index(p, "://")+3 : at]
			if user, pw, ok := strings.Cut(ui, ":"); ok {
				add(pw)
				if dec, err := url.PathUnescape(pw); err == nil {
					add(dec)
				}
			} else if !postgres(p[:strings.Index(p, "://")]) {
				add(user)
				if dec, err := url.PathUnescape(user); err == nil {
					add(dec)
				}
			}
		}
		if _, rq, ok := strings.Cut(p, "?"); ok {
			for kv := range strings.SplitSeq(rq, "&") {
				k, v, _ := strings.Cut(kv, "=")
				if name, err := url.QueryUnescape(k); err != nil || secretParam(name) {
					add(v)
					if dec, err := url.QueryUnescape(v); err == nil {
						add(dec)
					}
				}
			}
		}
	}
	return out
}

// Error renders err with every connection string of urls, and every
// credential in them, masked wherever the text quotes them.
func Error(err error, urls ...string) string {
	if err == nil {
		return ""
	}
	return Text(err.Error(), urls...)
}

// Text is Error for a string.
func Text(s string, urls ...string) string {
	for _, u := range urls {
		if u == "" {
			continue
		}
		s = strings.ReplaceAll(s, u, URL(u))
		secrets := Secrets(u)
		// Longest first, so that a secret containing another is masked whole.
		slices.SortFunc(secrets, func(a, b string) int { return len(b) - len(a) })
		for _, sec := range secrets {
			s = strings.ReplaceAll(s, sec, Mask)
		}
	}
	return s
}

// Wrap returns err with an Error text masked as Error masks it; errors.Is
// and errors.As still see err.
func Wrap(err error, urls ...string) error {
	if err == nil {
		return nil
	}
	return &wrapped{err: err, text: Error(err, urls...)}
}

type wrapped struct {
	err  error
	text string
}

func (w *wrapped) Error() string { return w.text }
func (w *wrapped) Unwrap() error { return w.err }
