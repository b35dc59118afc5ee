package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/pkg/registry"
)

// Obviously fake secrets: "test-only-not-a-secret" and friends.
const (
	testSecret    = "whsec_dGVzdC1vbmx5LW5vdC1hLXNlY3JldA=="     // test-only-not-a-secret
	testSecretOld = "whsec_b2xkLXRlc3Qtb25seS1ub3QtYS1zZWNyZXQ=" // old-test-only-not-a-secret
	stripeSecret  = "whsec_test_only_not_a_real_stripe_secret"
)

// signStandard signs as a Standard Webhooks sender does, written here from
// the published scheme (https://www.standardwebhooks.com), not with the
// code under test: base64(HMAC-SHA256(base64-decoded key, "id.ts.body")).
func signStandard(t testing.TB, secret, id string, ts int64, body []byte) string {
	t.Helper()
	key, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(secret, "whsec_"))
	require.NoError(t, err)
	mac := hmac.New(sha256.New, key)
	fmt.Fprintf(mac, "%s.%d.%s", id, ts, body)
	return "v1," + base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// signStripe signs as Stripe does: hex(HMAC-SHA256(secret as written, "t.body")).
func signStripe(secret string, ts int64, body []byte) string {
	mac := hmac.New(sha256.New, []byte(secret))
	fmt.Fprintf(mac, "%d.%s", ts, body)
	return hex.EncodeToString(mac.Sum(nil))
}

func secrets(t testing.TB, scheme string, values ...string) []Secret {
	t.Helper()
	s, err := ParseSecrets(scheme, values)
	require.NoError(t, err)
	return s
}

func headerFunc(h http.Header) func(string) []string { return h.Values }

var (
	now      = time.Unix(1_900_000_000, 0)
	stdHook  = &registry.Webhook{Provider: "p", Scheme: registry.SchemeStandardWebhooks, Tolerance: 5 * time.Minute}
	strpHook = &registry.Webhook{Provider: "s", Scheme: registry.SchemeStripe, Tolerance: 5 * time.Minute}
	body     = []byte(`{"type":"payment.succeeded","data":{"id":"ch_1"}}`)
)

func stdHeaders(id, ts, sig string) http.Header {
	h := http.Header{}
	if id != "" {
		h.Set(HeaderWebhookID, id)
	}
	if ts != "" {
		h.Set(HeaderWebhookTimestamp, ts)
	}
	if sig != "" {
		h.Set(HeaderWebhookSignature, sig)
	}
	return h
}

func TestStandardWebhooksSignatures(t *testing.T) {
	t.Parallel()
	keys := secrets(t, registry.SchemeStandardWebhooks, testSecret, testSecretOld)
	ts := now.Unix()
	tss := strconv.FormatInt(ts, 10)
	good := signStandard(t, testSecret, "msg_1", ts, body)
	old := signStandard(t, testSecretOld, "msg_1", ts, body)
	other := signStandard(t, "whsec_"+base64.StdEncoding.EncodeToString([]byte("another-test-only-key")), "msg_1", ts, body)

	for name, c := range map[string]struct {
		h    http.Header
		body []byte
		want string
	}{
		"signed with the current secret":  {stdHeaders("msg_1", tss, good), body, ""},
		"signed with the previous secret": {stdHeaders("msg_1", tss, old), body, ""},
		"several signatures, one good":    {stdHeaders("msg_1", tss, other+" "+good), body, ""},
		"unknown versions are skipped":    {stdHeaders("msg_1", tss, "v1a,bm90LWEtc2lnbmF0dXJl "+good), body, ""},
		"no signature":                    {stdHeaders("msg_1", tss, ""), body, ReasonMissingSignature},
		"only unknown versions":           {stdHeaders("msg_1", tss, "v2,abc"), body, ReasonMissingSignature},
		"wrong secret":                    {stdHeaders("msg_1", tss, other), body, ReasonBadSignature},
		"body changed":                    {stdHeaders("msg_1", tss, good), []byte(`{"type":"payment.failed","data":{"id":"ch_1"}}`), ReasonBadSignature},
		"id changed":                      {stdHeaders("msg_2", tss, good), body, ReasonBadSignature},
		"timestamp changed":               {stdHeaders("msg_1", strconv.FormatInt(ts+1, 10), good), body, ReasonBadSignature},
		"not base64":                      {stdHeaders("msg_1", tss, "v1,!!!"), body, ReasonMalformedSignature},
		"short signature":                 {stdHeaders("msg_1", tss, "v1,"+base64.StdEncoding.EncodeToString([]byte("short"))), body, ReasonMalformedSignature},
		"no comma":                        {stdHeaders("msg_1", tss, "v1"), body, ReasonMalformedSignature},
		"no timestamp":                    {stdHeaders("msg_1", "", good), body, ReasonMissingTimestamp},
		"timestamp not a number":          {stdHeaders("msg_1", "yesterday", good), body, ReasonMalformedTimestamp},
		"negative timestamp":              {stdHeaders("msg_1", "-1", good), body, ReasonMalformedTimestamp},
		"no id":                           {stdHeaders("", tss, good), body, ReasonMissingID},
		"id with a space":                 {stdHeaders("msg 1", tss, good), body, ReasonInvalidID},
		"id too long":                     {stdHeaders(strings.Repeat("i", 256), tss, good), body, ReasonInvalidID},
		"too many signatures":             {stdHeaders("msg_1", tss, strings.Repeat(other+" ", 17)+good), body, ReasonMalformedSignature},
	} {
		_, got := verify(stdHook, keys, headerFunc(c.h), c.body, now)
		require.Equal(t, c.want, got, name)
	}

	// Two signature headers: which one would a filter in front believe?
	h := stdHeaders("msg_1", tss, good)
	h.Add(HeaderWebhookSignature, other)
	_, got := verify(stdHook, keys, headerFunc(h), body, now)
	require.Equal(t, ReasonRepeatedHeader, got)

	v, got := verify(stdHook, keys, headerFunc(stdHeaders("msg_1", tss, good)), body, now)
	require.Empty(t, got)
	require.Equal(t, "msg_1", v.id)
}

func TestTimestampTolerance(t *testing.T) {
	t.Parallel()
	keys := secrets(t, registry.SchemeStandardWebhooks, testSecret)
	skeys := secrets(t, registry.SchemeStripe, stripeSecret)
	for name, c := range map[string]struct {
		at   time.Time
		want string
	}{
		"now":                   {now, ""},
		"4m59s ago":             {now.Add(-4*time.Minute - 59*time.Second), ""},
		"4m59s ahead":           {now.Add(4*time.Minute + 59*time.Second), ""},
		"5m1s ago: a replay":    {now.Add(-5*time.Minute - time.Second), ReasonStaleTimestamp},
		"an hour ago":           {now.Add(-time.Hour), ReasonStaleTimestamp},
		"5m1s ahead: a future":  {now.Add(5*time.Minute + time.Second), ReasonFutureTimestamp},
		"a year ahead":          {now.Add(365 * 24 * time.Hour), ReasonFutureTimestamp},
		"the epoch":             {time.Unix(0, 0), ReasonStaleTimestamp},
		"far in the past (1e9)": {time.Unix(1e9, 0), ReasonStaleTimestamp},
	} {
		ts := c.at.Unix()
		h := stdHeaders("msg_1", strconv.FormatInt(ts, 10), signStandard(t, testSecret, "msg_1", ts, body))
		_, got := verify(stdHook, keys, headerFunc(h), body, now)
		require.Equal(t, c.want, got, "standard: %s", name)

		sh := http.Header{}
		sh.Set(HeaderStripeSignature, fmt.Sprintf("t=%d,v1=%s", ts, signStripe(stripeSecret, ts, body)))
		_, got = verify(strpHook, skeys, headerFunc(sh), body, now)
		require.Equal(t, c.want, got, "stripe: %s", name)
	}
}

func TestStripeSignatures(t *testing.T) {
	t.Parallel()
	keys := secrets(t, registry.SchemeStripe, stripeSecret, "whsec_test_only_previous_stripe_secret")
	ts := now.Unix()
	good := signStripe(stripeSecret, ts, body)
	old := signStripe("whsec_test_only_previous_stripe_secret", ts, body)
	wrong := signStripe("whsec_test_only_some_other_secret", ts, body)
	for name, c := range map[string]struct {
		header string
		want   string
	}{
		"good":                      {fmt.Sprintf("t=%d,v1=%s", ts, good), ""},
		"previous secret":           {fmt.Sprintf("t=%d,v1=%s", ts, old), ""},
		"several v1, one good":      {fmt.Sprintf("t=%d,v1=%s,v1=%s", ts, wrong, good), ""},
		"v0 is skipped":             {fmt.Sprintf("t=%d,v0=%s,v1=%s", ts, wrong, good), ""},
		"spaces after commas":       {fmt.Sprintf("t=%d, v1=%s", ts, good), ""},
		"wrong secret":              {fmt.Sprintf("t=%d,v1=%s", ts, wrong), ReasonBadSignature},
		"other timestamp":           {fmt.Sprintf("t=%d,v1=%s", ts+1, good), ReasonBadSignature},
		"leading zero is signed as": {fmt.Sprintf("t=0%d,v1=%s", ts, good), ReasonBadSignature},
		"no v1":                     {fmt.Sprintf("t=%d,v0=%s", ts, good), ReasonMissingSignature},
		"no t":                      {"v1=" + good, ReasonMissingTimestamp},
		"two t":                     {fmt.Sprintf("t=%d,t=%d,v1=%s", ts, ts, good), ReasonMalformedTimestamp},
		"t not a number":            {"t=now,v1=" + good, ReasonMalformedTimestamp},
		"v1 not hex":                {fmt.Sprintf("t=%d,v1=%s", ts, strings.Repeat("z", 64)), ReasonMalformedSignature},
		"v1 short":                  {fmt.Sprintf("t=%d,v1=abcd", ts), ReasonMalformedSignature},
		"a pair without =":          {fmt.Sprintf("t=%d,v1", ts), ReasonMalformedSignature},
		"empty":                     {"", ReasonMissingSignature},
		"huge":                      {"t=1," + strings.Repeat("x=y,", 2000), ReasonMalformedSignature},
	} {
		h := http.Header{}
		if c.header != "" {
			h.Set(HeaderStripeSignature, c.header)
		}
		_, got := verify(strpHook, keys, headerFunc(h), body, now)
		require.Equal(t, c.want, got, name)
	}
}

func TestParseSecrets(t *testing.T) {
	t.Parallel()
	got, err := ParseSecrets(registry.SchemeStandardWebhooks, []string{testSecret, "", testSecretOld})
	require.NoError(t, err)
	require.Len(t, got, 2, "empty values are skipped")
	require.Equal(t, "[standard_webhooks secret]", got[0].String())
	for _, s := range []string{fmt.Sprintf("%v", got), fmt.Sprintf("%+v", got), fmt.Sprintf("%#v", got)} {
		require.NotContains(t, s, "test-only", "a secret never prints")
		require.NotContains(t, s, "dGVzdC1vbmx5")
	}

	for name, c := range map[string]struct {
		scheme, value string
	}{
		"no prefix":        {registry.SchemeStandardWebhooks, "dGVzdC1vbmx5LW5vdC1hLXNlY3JldA=="},
		"not base64":       {registry.SchemeStandardWebhooks, "whsec_not*base64"},
		"short key":        {registry.SchemeStandardWebhooks, "whsec_c2hvcnQ="},
		"white space":      {registry.SchemeStandardWebhooks, "whsec_dGVzdC1v bmx5LW5vdC1hLXNlY3JldA=="},
		"short stripe":     {registry.SchemeStripe, "whsec_short"},
		"control in value": {registry.SchemeStripe, "whsec_test_only\x01not_a_secret"},
	} {
		_, err := ParseSecrets(c.scheme, []string{testSecret[:0], c.value})
		require.Error(t, err, name)
		require.NotContains(t, err.Error(), c.value, "%s: the error never quotes the secret", name)
		require.Contains(t, err.Error(), "secret 2", name)
	}
}

// FuzzSignatureHeaders feeds both schemes' header parsers anything: they
// must never panic, and whatever they accept is within their bounds. The
// seed corpus (run by every go test) has the interesting shapes.
func FuzzSignatureHeaders(f *testing.F) {
	ts := now.Unix()
	for _, seed := range []string{
		"", "v1,", "v1,=", signStandard(f, testSecret, "msg_1", ts, body), "v1,a v1,b v2,c", strings.Repeat("v1,AAAA ", 20),
		fmt.Sprintf("t=%d,v1=%s", ts, signStripe(stripeSecret, ts, body)), "t=,v1=", "t=1,t=2", "t=99999999999999999999,v1=00",
		"\x00", "v1,\xff\xfe", "t=1,v1=" + strings.Repeat("0", 64) + ",v1=" + strings.Repeat("f", 64),
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, h string) {
		if sigs, reason := standardSignatures(h); reason == "" {
			require.NotEmpty(t, sigs)
			require.LessOrEqual(t, len(sigs), maxSignatures)
			for _, s := range sigs {
				require.Len(t, s, sha256.Size)
			}
		} else {
			require.Contains(t, Reasons, reason)
		}
		if ts, raw, sigs, reason := stripeSignature(h); reason == "" {
			require.NotEmpty(t, sigs)
			require.GreaterOrEqual(t, ts, int64(0))
			back, err := strconv.ParseInt(raw, 10, 64)
			require.NoError(t, err)
			require.Equal(t, ts, back, "the timestamp is signed as written")
		} else {
			require.Contains(t, Reasons, reason)
		}
		// The whole check never panics and never accepts a made-up header.
		keys := secrets(t, registry.SchemeStandardWebhooks, testSecret)
		hd := stdHeaders("msg_1", strconv.FormatInt(ts, 10), h)
		if _, reason := verify(stdHook, keys, headerFunc(hd), body, now); h != signStandard(t, testSecret, "msg_1", ts, body) &&
			!strings.Contains(h, signStandard(t, testSecret, "msg_1", ts, body)[3:]) {
			require.NotEmpty(t, reason, "accepted a header without the right signature: %q", h)
		}
	})
}
