package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"time"
)

// runProbe is "opledger probe URL": a container healthcheck for images with
// no shell or curl. It exits 0 when URL answers 2xx within the timeout.
func runProbe(ctx context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: opledger probe [-timeout 2s] URL\n\nExits 0 if URL (e.g. http://127.0.0.1:8480/readyz) answers 2xx.")
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return err
		}
		return errUsage
	}
	if fs.NArg() != 1 {
		fs.Usage()
		return errUsage
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fs.Arg(0), nil)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("probe: %w", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("probe: %s answered %s: %s", fs.Arg(0), resp.Status, body)
	}
	_, _ = stdout.Write(body)
	return nil
}
