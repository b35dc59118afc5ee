// Package docs embeds the documents that binaries serve: the OpenAPI
// description of the operators' HTTP API (openapi.yaml), served at
// GET /v1/openapi.yaml.
package docs

import _ "embed"

// OpenAPI is docs/openapi.yaml.
//
//go:embed openapi.yaml
var OpenAPI []byte
