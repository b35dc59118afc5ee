package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/opledger/opledger/internal/app"
)

// runService is the hidden "opledger service <name> [flags]": one service,
// exactly as its binary under services/ runs it (app.ParseServiceFlags,
// app.RunService). It exists so that "opledger eval -kill" can run
// dispatchers and the reconciler as processes of this same binary and kill
// them, without building the service binaries first.
func runService(ctx context.Context, args []string, env func(string) (string, bool), _, stderr io.Writer) error {
	usage := fmt.Sprintf("usage: opledger service <%s> [flags]\n", strings.Join(app.AllServices, "|"))
	if len(args) == 0 || !slices.Contains(app.AllServices, args[0]) {
		fmt.Fprint(stderr, usage)
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			return flag.ErrHelp
		}
		return errUsage
	}
	cfg, err := app.ParseServiceFlags(args[0], args[1:], env, stderr)
	switch {
	case errors.Is(err, flag.ErrHelp):
		return err
	case err != nil:
		fmt.Fprintln(stderr, err)
		return errUsage
	}
	return app.RunService(ctx, cfg)
}
