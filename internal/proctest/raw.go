package proctest

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"
)

// PublishRaw publishes body and header on subject through JetStream as they
// are, byte for byte: what a client that is not pkg/client may send (field
// names in another case, a key given twice, bytes that are not UTF-8). It
// retries for up to a minute while NATS does not acknowledge it. The
// intent is not remembered: Check and WaitSettled do not wait for its
// answer; find it with Answers.
func (s *System) PublishRaw(subject string, header nats.Header, body []byte) {
	s.t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err := s.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Header: header, Data: body})
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("proctest: publish raw on %s: %v", subject, err)
		}
		time.Sleep(250 * time.Millisecond)
	}
}
