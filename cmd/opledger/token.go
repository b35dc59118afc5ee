package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/opledger/opledger/internal/api"
	"github.com/opledger/opledger/internal/ops"
)

// runToken is "opledger token": a new API token for an actor. It prints the
// token once and the line to add to the tokens file, which keeps only the
// token's SHA-256.
func runToken(_ context.Context, args []string, _ func(string) (string, bool), stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("opledger token", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: opledger token -actor NAME -role viewer|approver|operator|admin|metrics [-token-file FILE]\n"+
			"       opledger token -actor NAME -role agent -tenant TENANT [-workflow-prefix PREFIX] [-token-file FILE]\n\n"+
			"Prints a new random API token, once (or writes it to FILE), and the line to add to the\n"+
			"tokens file that OPLEDGER_API_TOKENS names (it holds the token's SHA-256, never the token).")
		fs.PrintDefaults()
	}
	actor := fs.String("actor", "", "who the token is for, as the audit trail will name them (letters, digits, . _ @ -)")
	role := fs.String("role", "", "viewer (reads), approver (approves, denies), operator (resolves, cancels, compensates), admin, metrics (/metrics and /readyz only: scrapers, probes), or agent (the HTTP intent API: submits and reads in its tenant)")
	tenant := fs.String("tenant", "", "role agent: the tenant its intents go to and its reads come from (default for the default tenant)")
	prefix := fs.String("workflow-prefix", "", "role agent: only the workflows whose ids start with this")
	tokenFile := fs.String("token-file", "", "write the token to this new file (mode 0600) instead of printing it, e.g. for `opledger probe -token-file`")
	if err := parse(fs, args); err != nil {
		return err
	}
	if *actor == "" || !ops.ValidRole(ops.Role(*role)) && ops.Role(*role) != ops.RoleAgent {
		fs.Usage()
		return errUsage
	}
	token, entry, err := api.GenerateTokenFor(api.TokenEntry{Actor: *actor, Role: ops.Role(*role), Tenant: *tenant, WorkflowPrefix: *prefix})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	if *tokenFile != "" {
		f, err := os.OpenFile(*tokenFile, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err == nil {
			_, err = f.WriteString(token + "\n")
			if cerr := f.Close(); err == nil {
				err = cerr
			}
		}
		if err != nil {
			return fmt.Errorf("token: %w", err)
		}
		fmt.Fprintf(stdout, "token for %s (%s) written to %s\n\n", entry.Actor, entry.Role, *tokenFile)
	} else {
		fmt.Fprintf(stdout, "token for %s (%s); it is shown this once, so hand it over now:\n\n  %s\n\n", entry.Actor, entry.Role, token)
	}
	fmt.Fprintf(stdout, "add this line to the tokens file ($OPLEDGER_API_TOKENS) and restart the API's process:\n\n%s\n", entry.Line())
	return nil
}
