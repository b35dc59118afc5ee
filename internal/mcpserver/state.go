package mcpserver

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"strings"
	"time"
)

// stateTTL bounds how long an approval elicitation's answer is taken.
const stateTTL = time.Hour

// approvalState is what the request state of an approval elicitation
// binds: the call's event, the operation and its arguments hash, and how
// the client was asked. It is signed (HMAC-SHA256), since it comes back
// from the client.
type approvalState struct {
	EventID     string `json:"e"`
	OperationID string `json:"o"`
	ArgsHash    string `json:"h"`
	Mode        string `json:"m"`
	Expires     int64  `json:"x"`
}

func (s *server) signState(st approvalState) (string, error) {
	raw, err := json.Marshal(st)
	if err != nil {
		return "", err
	}
	body := base64.RawURLEncoding.EncodeToString(raw)
	return body + "." + s.mac(body), nil
}

func (s *server) verifyState(state string) (approvalState, error) {
	var st approvalState
	if len(state) > 2048 {
		return st, errors.New("request state too long")
	}
	body, sig, ok := strings.Cut(state, ".")
	if !ok || !hmac.Equal([]byte(sig), []byte(s.mac(body))) {
		return st, errors.New("request state not signed by this server")
	}
	raw, err := base64.RawURLEncoding.DecodeString(body)
	if err != nil {
		return st, err
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, err
	}
	if time.Now().Unix() > st.Expires {
		return st, errors.New("request state expired")
	}
	if st.Mode != "url" && st.Mode != "form" {
		return st, errors.New("request state has no mode")
	}
	return st, nil
}

func (s *server) mac(body string) string {
	m := hmac.New(sha256.New, s.stateKey)
	m.Write([]byte("opledger.mcp.approval.v1\n" + body))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}
