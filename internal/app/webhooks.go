package app

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"os"
	"strings"

	"github.com/opledger/opledger/internal/webhook"
	"github.com/opledger/opledger/pkg/registry"
)

// WebhookSecretsEnv is the environment variable that holds a webhook
// provider's signing secrets: OPLEDGER_WEBHOOK_SECRETS_<PROVIDER> (upper
// case, "-" as "_"), several separated by white space or commas (the new
// one and the one being retired, while rotating). The same name with
// _FILE appended names a file holding them instead.
func WebhookSecretsEnv(provider string) string {
	return "OPLEDGER_WEBHOOK_SECRETS_" + strings.ToUpper(strings.ReplaceAll(provider, "-", "_"))
}

// WebhookSecrets reads the signing secrets of every provider of the
// registry at the program's edge: from files (by provider, the
// -webhook-secrets-file flags), else from WebhookSecretsEnv(provider)+"_FILE",
// and from WebhookSecretsEnv(provider). A provider with none is left out
// (its deliveries are refused, no_secret). Errors name the provider and
// the variable or file, never a secret.
func WebhookSecrets(reg *registry.Registry, lookupEnv func(string) (string, bool), files map[string]string) (map[string][]webhook.Secret, error) {
	for p := range files {
		if _, ok := reg.Webhook(p); !ok {
			return nil, fmt.Errorf("webhook secrets file for provider %q, which the registry does not have (it has %v)", p, reg.Webhooks())
		}
	}
	out := map[string][]webhook.Secret{}
	for _, p := range reg.Webhooks() {
		w, _ := reg.Webhook(p)
		env := WebhookSecretsEnv(p)
		var values []string
		var from []string
		file := files[p]
		if file == "" && lookupEnv != nil {
			file, _ = lookupEnv(env + "_FILE")
		}
		if file != "" {
			b, err := os.ReadFile(file)
			if err != nil {
				return nil, fmt.Errorf("webhook provider %s: secrets file: %w", p, err)
			}
			values = append(values, splitSecrets(string(b))...)
			from = append(from, file)
		}
		if lookupEnv != nil {
			if v, ok := lookupEnv(env); ok {
				values = append(values, splitSecrets(v)...)
				from = append(from, env)
			}
		}
		secrets, err := webhook.ParseSecrets(w.Scheme, values)
		if err != nil {
			return nil, fmt.Errorf("webhook provider %s (%s): %w", p, strings.Join(from, ", "), err)
		}
		if len(secrets) > 0 {
			out[p] = secrets
		}
	}
	return out, nil
}

func splitSecrets(s string) []string {
	return strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r' })
}

// devWebhookSecrets makes a fresh signing secret for every provider of the
// registry, in its scheme's form, for a stack whose stand-in vendors sign
// with them; they live as long as the process and are never printed.
func devWebhookSecrets(reg *registry.Registry) (raw map[string]string, parsed map[string][]webhook.Secret, err error) {
	raw, parsed = map[string]string{}, map[string][]webhook.Secret{}
	for _, p := range reg.Webhooks() {
		w, _ := reg.Webhook(p)
		key := make([]byte, 32)
		if _, err := rand.Read(key); err != nil {
			return nil, nil, err
		}
		v := "whsec_" + base64.StdEncoding.EncodeToString(key)
		if w.Scheme == registry.SchemeStripe {
			v = "whsec_" + hex.EncodeToString(key)
		}
		s, err := webhook.ParseSecrets(w.Scheme, []string{v})
		if err != nil {
			return nil, nil, err
		}
		raw[p], parsed[p] = v, s
	}
	return raw, parsed, nil
}
