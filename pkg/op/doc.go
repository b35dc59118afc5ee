// Package op is opledger's domain core: the operation envelope, its states and
// the pure transition function, side-effect classes, dedupe decisions, vendor
// outcomes and the sentinel errors every other package speaks.
//
// It imports only the standard library. Everything else in opledger imports it;
// it imports nothing of ours.
package op
