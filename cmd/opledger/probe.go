package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
)

// runProbe is "opledger probe URL": a container healthcheck for images with
// no shell or curl. It exits 0 when URL answers 2xx within the timeout. With
// a token file it sends the token as a bearer credential (/readyz and
// /metrics need one, unless the service opens them to loopback).
func runProbe(ctx context.Context, args []string, env func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger probe", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: opledger probe [-timeout 2s] [-token-file FILE] URL\n\nExits 0 if URL (e.g. http://127.0.0.1:8480/readyz) answers 2xx.")
		fs.PrintDefaults()
	}
	timeout := fs.Duration("timeout", 2*time.Second, "how long to wait for the answer")
	defTokenFile, _ := env("OPLEDGER_PROBE_TOKEN_FILE")
	tokenFile := fs.String("token-file", defTokenFile, "file holding a token to send as \"Authorization: Bearer\" (role metrics is enough) [OPLEDGER_PROBE_TOKEN_FILE]")
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
	if *tokenFile != "" {
		data, err := os.ReadFile(*tokenFile)
		if err != nil {
			return fmt.Errorf("probe: token: %w", err)
		}
		token := strings.TrimSpace(string(data))
		if token == "" || strings.ContainsAny(token, " \t\r\n") {
			return fmt.Errorf("probe: %s holds no single token", *tokenFile)
		}
		req.Header.Set("Authorization", "Bearer "+token)
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
