package wire

import (
	"bytes"
	"encoding/json"
	"io"
	"reflect"
	"testing"
)

// quickSeeds are messages that keep the strict rules and messages that
// break them, each in a way the quick checks must not let through.
var quickSeeds = []string{
	`{"spec":"opledger.result.v1","operation_id":"op_1","event_id":"e","workflow_id":"wf","tool":"t","status":"completed_success","version":4,"dedupe_decision":"new","final":true,"retry_recommendation":"none","safe_user_message":"done","attempt_count":1,"at":"2026-12-03T10:00:00Z"}`,
	`{"spec":"opledger.command.v1","kind":"dispatch","operation_id":"op_1","tool":"t","idempotency_key":"k","lease_epoch":1,"workflow_id":"wf","state":"pending_dispatch"}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","run_id":"r","tool":"t","intent":"i","args":{},"actor":{"type":"agent","id":"a"},"correlation":{"k":"v"},"dedupe_override":{"reason":"why"}}`,
	`{"spec":"opledger.intent.v1","event_id":"e","workflow_id":"wf_1","tool":"t","args":{"a":{"b":[1,2,{"c":null}]}}}`,
	` { "spec" : "x" , "version" : -1.5e3 , "final" : false , "at" : null } `,
	`{"spec":"x","spec":"y"}`,
	`{"Spec":"x"}`,
	`{"STATUS":"x"}`,
	`{"sp\u0065c":"x","spec":"y"}`,
	`{"spec":"x","args":{"a":1,"a":2}}`,
	`{"args":{"deep":[{"k":1,"k":1}]}}`,
	`{"actor":{"type":"a","id":"b","ID":"c"}}`,
	`{"actor":"not an object"}`,
	`{"correlation":{"x":"1","x":"2"}}`,
	`{"unknown":1}`,
	`{"spec":"x"} trailing`,
	`{"spec":"x"}{}`,
	`[{"a":1},{"a":1,"a":2}]`,
	`{"spec":"x",}`,
	`{"spec" "x"}`,
	`{"spec":tru}`,
	`{"a":"\"","a":"\\"}`,
	`{"a\\":1,"a\\":2}`,
	`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k1":18}`,
	`{"k1":1,"k2":2,"k3":3,"k4":4,"k5":5,"k6":6,"k7":7,"k8":8,"k9":9,"k10":10,"k11":11,"k12":12,"k13":13,"k14":14,"k15":15,"k16":16,"k17":17,"k18":18}`,
	`"just a string"`, `12`, `null`, `[]`, `{}`, ``, `{`, `[[[`,
}

// slowValue is ReadJSON's check without the quick path.
func slowValue(data []byte, t reflect.Type) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if checkValue(dec, t, "") != nil {
		return false
	}
	_, err := dec.Token()
	return err == io.EOF
}

// checkQuickAgrees fails when a quick check passes a message the slow one
// refuses (it would let through what opledger refuses), or refuses a
// message the slow one passes and that the quick one should read (only a
// key written with an escape is left to the slow check on purpose).
func checkQuickAgrees(t *testing.T, data []byte) {
	t.Helper()
	for _, typ := range []reflect.Type{reflect.TypeFor[*Result](), reflect.TypeFor[*Command](), reflect.TypeFor[*Intent](), reflect.TypeFor[*map[string]any](), nil} {
		quick, slow := quickValue(data, typ), slowValue(data, typ)
		if quick && !slow {
			t.Fatalf("quickValue passes what checkValue refuses, as %v: %q", typ, data)
		}
		if slow && !quick && !bytes.Contains(data, []byte(`\`)) {
			t.Errorf("quickValue refuses what checkValue passes, as %v: %q", typ, data)
		}
	}
	for _, l := range []struct {
		fields []string
		nested map[string][]string
	}{{intentFields, intentNested}, {commandFields, nil}, {nil, nil}} {
		quick, slow := quickObject(data, l.fields, l.nested), strictObject(data, l.fields, l.nested) == nil
		if quick && !slow {
			t.Fatalf("quickObject passes what strictObject refuses (fields %v): %q", l.fields, data)
		}
		if slow && !quick && !bytes.Contains(data, []byte(`\`)) {
			t.Errorf("quickObject refuses what strictObject passes (fields %v): %q", l.fields, data)
		}
	}
}

func TestQuickChecksAgreeWithTheStrictOnes(t *testing.T) {
	for _, s := range quickSeeds {
		checkQuickAgrees(t, []byte(s))
	}
	// The messages opledger sends are read by the quick path.
	for _, s := range quickSeeds[:3] {
		if !quickValue([]byte(s), reflect.TypeFor[*Result]()) {
			t.Errorf("a well-formed message takes the slow path: %s", s)
		}
	}
}

// FuzzQuickChecks: the quick checks never pass what the strict ones refuse.
func FuzzQuickChecks(f *testing.F) {
	for _, s := range quickSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if checkUTF8(data) != nil {
			return // refused before either check runs
		}
		checkQuickAgrees(t, data)
	})
}

func BenchmarkDecodeResult(b *testing.B) {
	body := []byte(quickSeeds[0])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeResult(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeCommand(b *testing.B) {
	body := []byte(quickSeeds[1])
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeCommand(body); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeIntent(b *testing.B) {
	body := []byte(`{"spec":"opledger.intent.v1","event_id":"conv_1:call_1","workflow_id":"wf_1","tool":"capture_payment","args":{"order_id":"o","customer_id":"c","amount_cents":4900,"currency":"USD"}}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeIntent("opledger.intents.wf_1", "", body); err != nil {
			b.Fatal(err)
		}
	}
}
