// Package regedit edits a registry document as a YAML tree, for tests and
// the evaluation, which run the example registry with settings of their own
// (shorter timeouts, the apply bound their stand-in vendors keep) and leave
// everything else exactly as it ships.
package regedit

import (
	"fmt"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Tool describes a tool to a Set filter.
type Tool struct {
	Name string
	// VendorIdempotency is true when its adapter sends an idempotency header.
	VendorIdempotency bool
}

// Set sets field (a dotted path, such as approval.approvals_required) to
// value, written as a plain YAML scalar, in every tool for which only
// returns true (all tools when only is nil), adding the field and the
// mappings on its path where they are missing.
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
		parts := strings.Split(field, ".")
		cur := def
		for _, part := range parts[:len(parts)-1] {
			next := mapping(cur, part)
			if next == nil || next.Kind != yaml.MappingNode {
				if next == nil {
					next = &yaml.Node{Kind: yaml.MappingNode}
					cur.Content = append(cur.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: part}, next)
				} else {
					next.Kind, next.Tag, next.Value, next.Content = yaml.MappingNode, "", "", nil
				}
			}
			cur = next
		}
		last := parts[len(parts)-1]
		if v := mapping(cur, last); v != nil {
			v.Kind, v.Tag, v.Value, v.Content, v.Style = yaml.ScalarNode, "", value, nil, 0
			continue
		}
		cur.Content = append(cur.Content,
			&yaml.Node{Kind: yaml.ScalarNode, Value: last},
			&yaml.Node{Kind: yaml.ScalarNode, Value: value})
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
