package op

// SideEffectClass is what calling a tool does to the world. The operator's
// registry sets it per tool; it decides retry policy, leases, approvals and
// whether a redelivered dispatch may be re-sent. Hints from outside (an MCP
// client, a model) never override it.
type SideEffectClass string

const (
	// ClassPureRead changes nothing; retries are safe.
	ClassPureRead SideEffectClass = "pure_read"
	// ClassInternalWrite writes only inside our own transactional boundary.
	ClassInternalWrite SideEffectClass = "internal_write"
	// ClassExternalIdempotent writes to a vendor that honours an idempotency key.
	ClassExternalIdempotent SideEffectClass = "external_idempotent"
	// ClassExternalNonIdempotent writes to a vendor with weak or no dedupe.
	ClassExternalNonIdempotent SideEffectClass = "external_non_idempotent"
	// ClassExternalIrreversible moves money or sends something that cannot be taken back.
	ClassExternalIrreversible SideEffectClass = "external_irreversible"
)

// Classes lists every class, least to most dangerous.
var Classes = []SideEffectClass{
	ClassPureRead, ClassInternalWrite, ClassExternalIdempotent,
	ClassExternalNonIdempotent, ClassExternalIrreversible,
}

// Valid reports whether c is one of Classes.
func (c SideEffectClass) Valid() bool {
	for _, v := range Classes {
		if v == c {
			return true
		}
	}
	return false
}

// ReadOnly is MCP's readOnlyHint: the tool changes nothing.
func (c SideEffectClass) ReadOnly() bool { return c == ClassPureRead }

// Idempotent is MCP's idempotentHint: repeating the call with the same
// arguments has no further effect.
func (c SideEffectClass) Idempotent() bool {
	return c == ClassPureRead || c == ClassInternalWrite || c == ClassExternalIdempotent
}

// Destructive is MCP's destructiveHint: the effect may not be undoable.
func (c SideEffectClass) Destructive() bool { return c == ClassExternalIrreversible }

// External reports whether the effect leaves our own database.
func (c SideEffectClass) External() bool {
	return c == ClassExternalIdempotent || c == ClassExternalNonIdempotent || c == ClassExternalIrreversible
}

// ResendAfterAmbiguity reports whether a request whose outcome is unknown may
// be sent again without reconciling first. Only reads and writes the vendor
// deduplicates by our key qualify; everything else must be reconciled.
func (c SideEffectClass) ResendAfterAmbiguity(vendorKeySupported bool) bool {
	switch c {
	case ClassPureRead, ClassInternalWrite:
		return true
	case ClassExternalIdempotent:
		return vendorKeySupported
	}
	return false
}
