// Package app wires opledger's parts into running processes. Each file has
// one reason to change:
//
//   - infra.go: where Postgres and NATS come from (a URL, or a private
//     cluster and an embedded server), migrations and streams;
//   - services.go: starting planner-ingest, dispatchers, the reconciler, the
//     compensator and the outbox relays of one process, and their readiness;
//   - stack.go: a whole opledger in one process (dev, demo, bench, tests);
//   - http.go: the operational HTTP endpoints every process serves;
//   - logging.go: the process logger;
//   - registry.go: loading the operator's registry with vendor URLs and
//     secrets from the program's edge;
//   - webhooks.go: the webhook providers' signing secrets, read at the
//     program's edge (and made afresh for a stack's stand-in vendors);
//   - service.go: a service binary's configuration (flags and environment,
//     read at the program's edge) and its run loop;
//   - boot.go: what a service binary's HTTP endpoints say while it starts
//     (readiness before the services run) and its bounded stop;
//   - natsflags.go: the NATS credential and TLS flags every binary takes;
//   - dbusers.go: each service's Postgres login user in exactly its roles
//     (opledger db-users);
//   - intents.go: how the HTTP intent API reaches NATS, one connection per
//     tenant as that tenant's agent.
//
// cmd/opledger and the binaries under services/ are thin mains over it.
package app
