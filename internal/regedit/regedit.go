// Package regedit edits a registry document as a YAML tree, for tests and
// the evaluation, which run the example registry with settings of their own
// (shorter timeouts, the apply bound their stand-in vendors keep) and leave
// everything else exactly as it ships.
package regedit

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Tool describes a tool to a Set filter.
type Tool struct {
	Name string
	// VendorIdempotency is true when its adapter sends an idempotency header.
	VendorIdempotency bool
}

// Set sets field to value in every tool for which only returns true (all
// tools when only is nil), adding the field where it is missing.
func Set(data []byte, field, value string, only func(Tool) bool) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("regedit: %w", err)
	}
	if len(doc.Content) == 0 {
		return nil, fmt.Errorf("regedit: empty document")
	}
	tools := mapping(doc.Content[0], "tools")
	if tools == nil || tools.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("regedit: no tools mapping")
	}
	for i := 1; i < len(tools.Content); i += 2 {
		def := tools.Content[i]
		t := Tool{Name: tools.Content[i-1].Value}
		if a := mapping(def, "adapter"); a != nil {
			if h := mapping(a, "idempotency_header"); h != nil && h.Value != "" {
				t.VendorIdempotency = true
			}
		}
		if only != nil && !only(t) {
			continue
		}
		if v := mapping(def, field); v != nil {
			v.Kind, v.Tag, v.Value, v.Content = yaml.ScalarNode, "!!str", value, nil
			continue
		}
		def.Content = append(def.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: field},
			&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
	}
	return yaml.Marshal(&doc)
}

func mapping(n *yaml.Node, key string) *yaml.Node {
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return n.Content[i+1]
		}
	}
	return nil
}
