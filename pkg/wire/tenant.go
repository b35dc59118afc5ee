package wire

import (
	"regexp"
	"strings"
)

// Tenants. Every operation, inbox row and key belongs to a tenant
// (namespace); event ids, idempotency keys, entities and results are scoped
// by it, so one tenant can neither block another's event ids or keys nor
// see another's operations in an answer. The tenant comes from the subject
// an intent is published on (NATS permissions say who may publish where),
// never from the message body:
//
//	opledger.intents.<tenant>.<workflow_id>   results on opledger.results.<tenant>.<workflow_id>
//	opledger.intents.<workflow_id>            the default tenant; results on opledger.results.<workflow_id>
//
// The explicit form opledger.intents.default.<workflow_id> is the default
// tenant too; its results go to the short form.
const DefaultTenant = "default"

var tenantRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// ValidTenant reports whether s can name a tenant: 1 to 63 lower-case
// letters, digits, '_' and '-', starting with a letter or digit.
func ValidTenant(s string) bool { return tenantRE.MatchString(s) }

// TenantIntentSubject is where an agent of tenant publishes intents for a
// workflow.
func TenantIntentSubject(tenant, workflowID string) string {
	if tenant == "" || tenant == DefaultTenant {
		return IntentSubject(workflowID)
	}
	return IntentSubjectPrefix + tenant + "." + workflowID
}

// TenantResultSubject is where results for a tenant's workflow are published.
func TenantResultSubject(tenant, workflowID string) string {
	if tenant == "" || tenant == DefaultTenant {
		return ResultSubject(workflowID)
	}
	return ResultSubjectPrefix + tenant + "." + workflowID
}

// TenantResultFilter matches every result of a tenant (for a tenant other
// than the default one).
func TenantResultFilter(tenant string) string { return ResultSubjectPrefix + tenant + ".>" }

// ParseIntentSubject splits an intent subject into its tenant and
// workflow. ok is false when the subject names neither a valid tenant nor
// a valid workflow in the forms above.
func ParseIntentSubject(subject string) (tenant, workflowID string, ok bool) {
	rest, found := strings.CutPrefix(subject, IntentSubjectPrefix)
	if !found {
		return "", "", false
	}
	if t, wf, two := strings.Cut(rest, "."); two {
		if ValidTenant(t) && ValidWorkflowID(wf) {
			return t, wf, true
		}
		return "", "", false
	}
	if ValidWorkflowID(rest) {
		return DefaultTenant, rest, true
	}
	return "", "", false
}

// TenantScope prefixes an identity (an idempotency key, an entity id, a
// dedupe key) with its tenant, so that the same business identity in two
// tenants is two identities. The default tenant's identities are left as
// they are.
func TenantScope(tenant, id string) string {
	if tenant == "" || tenant == DefaultTenant || id == "" {
		return id
	}
	return tenant + "/" + id
}
