// Package examples holds opledger's example tool registry (registry.yaml),
// embedded so that every binary runs from any directory without a registry
// file of its own.
package examples

import _ "embed"

// Registry is examples/registry.yaml: the tools of the article, for the
// local stand-in vendors.
//
//go:embed registry.yaml
var Registry []byte
