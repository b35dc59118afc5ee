// Package patterns holds no code: its tests run the five failure patterns of
// the article "Designing Idempotent Tool-Calling Loops for Production LLM
// Agents" ("The recurring failure pattern") end to end, against a whole
// opledger (app.StartStack), agents speaking the wire protocol (pkg/client)
// and the local stand-in vendors (internal/vendors). Each test asserts on
// what the vendors really did and on what the ledger says happened.
package patterns
