// Package client is a small Go client for agents: publish an intent, read the
// results for a workflow. It speaks only the documented wire protocol
// (docs/protocol.md), so anything it does, a client in another language can do.
package client

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/opledger/opledger/pkg/wire"
)

// Client publishes intents and reads results.
type Client struct {
	nc *nats.Conn
	js jetstream.JetStream
}

// Connect dials NATS at url.
func Connect(url, name string) (*Client, error) {
	nc, err := nats.Connect(url, nats.Name(name))
	if err != nil {
		return nil, fmt.Errorf("client: connect: %w", err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("client: jetstream: %w", err)
	}
	return &Client{nc: nc, js: js}, nil
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// Publish sends an intent to opledger.intents.<workflow_id> with Nats-Msg-Id =
// event_id and waits for JetStream to store it. It reports whether JetStream
// saw the event id inside its duplicate window (the ledger dedupes either way).
func (c *Client) Publish(ctx context.Context, in wire.Intent, traceparent string) (duplicate bool, err error) {
	if in.Spec == "" {
		in.Spec = wire.SpecIntent
	}
	data, err := json.Marshal(in)
	if err != nil {
		return false, fmt.Errorf("client: encode intent: %w", err)
	}
	m := nats.NewMsg(wire.IntentSubject(in.WorkflowID))
	m.Data = data
	m.Header.Set(wire.HeaderMsgID, in.EventID)
	if traceparent != "" {
		m.Header.Set(wire.HeaderTraceparent, traceparent)
	}
	ack, err := c.js.PublishMsg(ctx, m)
	if err != nil {
		return false, fmt.Errorf("client: publish intent %s: %w", in.EventID, err)
	}
	return ack.Duplicate, nil
}

// Results streams every result published for subjects matching filter
// (wire.ResultSubject(workflowID), or "opledger.results.>" for all), from the
// start of the RESULTS stream, until ctx ends.
func (c *Client) Results(ctx context.Context, filter string) (<-chan wire.Result, error) {
	cons, err := c.js.OrderedConsumer(ctx, wire.StreamResults, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}})
	if err != nil {
		return nil, fmt.Errorf("client: results consumer: %w", err)
	}
	out := make(chan wire.Result, 1024)
	cc, err := cons.Consume(func(m jetstream.Msg) {
		var r wire.Result
		if json.Unmarshal(m.Data(), &r) == nil {
			select {
			case out <- r:
			case <-ctx.Done():
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("client: results: %w", err)
	}
	go func() {
		<-ctx.Done()
		cc.Stop()
	}()
	return out, nil
}
