package main

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/opledger/opledger/internal/api"
)

// opsParked is "opledger ops parked": the outbox rows NATS refused until
// they were parked.
func opsParked(ctx context.Context, c *opsCmd, args []string) error {
	limit := c.fs.Int("limit", 0, "at most this many (default 100, at most 1000)")
	if _, err := c.parse(args, 0); err != nil {
		return err
	}
	path := "/v1/outbox/parked"
	if *limit != 0 {
		path += "?" + url.Values{"limit": {strconv.Itoa(*limit)}}.Encode()
	}
	var res api.ParkedResponse
	data, err := c.do(ctx, http.MethodGet, path, nil, &res)
	if err != nil {
		return fmt.Errorf("parked: %w", err)
	}
	if c.json {
		return c.printJSON(data)
	}
	if res.Total == 0 {
		fmt.Fprintln(c.stdout, "no parked messages")
		return nil
	}
	tw := tabwriter.NewWriter(c.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tPARKED\tFAILURES\tBYTES\tSUBJECT\tOPERATION\tLAST ERROR")
	now := time.Now()
	for _, p := range res.Parked {
		fmt.Fprintf(tw, "%d\t%s\t%d\t%d\t%s\t%s\t%s\n", p.ID, age(now.Sub(p.ParkedAt)), p.Failures, p.PayloadBytes,
			clean(p.Subject), clean(p.OperationID), clean(p.LastError))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if int64(len(res.Parked)) < res.Total {
		fmt.Fprintf(c.stdout, "%d of %d shown (-limit)\n", len(res.Parked), res.Total)
	}
	return nil
}

// opsRequeue is "opledger ops requeue ID -reason R": a parked row is
// published again.
func opsRequeue(ctx context.Context, c *opsCmd, args []string) error {
	reason := c.reason()
	id, err := c.parse(args, 1)
	if err != nil {
		return err
	}
	if err := c.needReason(*reason); err != nil {
		return err
	}
	if _, err := strconv.ParseInt(id, 10, 64); err != nil {
		fmt.Fprintf(c.stderr, "opledger ops requeue: %q is not an outbox row id (opledger ops parked lists them)\n", id)
		return errUsage
	}
	var res api.RequeueResponse
	data, err := c.do(ctx, http.MethodPost, "/v1/outbox/parked/"+id+"/requeue", map[string]string{"reason": *reason}, &res)
	if err != nil {
		return fmt.Errorf("requeue %s: %w", id, err)
	}
	if c.json {
		return c.printJSON(data)
	}
	fmt.Fprintf(c.stdout, "requeued %d (%s): published again shortly\n", res.Requeued.ID, clean(res.Requeued.Subject))
	return nil
}
