package canon_test

import (
	"fmt"

	"github.com/opledger/opledger/pkg/canon"
)

func ExampleSchema_Canonicalize() {
	schema, err := canon.CompileSchema("payments.capture", []byte(`{
	  "type": "object",
	  "additionalProperties": false,
	  "required": ["order_id", "amount_cents", "currency"],
	  "properties": {
	    "order_id": {"type": "string"},
	    "amount_cents": {"type": "integer", "minimum": 1},
	    "currency": {"type": "string", "enum": ["USD", "EUR"], "default": "USD"}
	  }
	}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	key, err := canon.ParseTemplate("payment:{order_id}:capture:{amount_cents}:{currency}")
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, raw := range []string{
		`{"order_id":"A-1","amount_cents":4900}`,
		`{ "currency": "usd", "amount_cents": 4900, "order_id": " A-1 " }`,
		`{"order_id":"A-1","amount_cents":49.00}`,
	} {
		args, err := schema.Canonicalize([]byte(raw))
		if err != nil {
			fmt.Println(err)
			continue
		}
		k, err := key.Render(args, 1)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(string(args.JSON), k)
	}
	// Output:
	// {"amount_cents":4900,"currency":"USD","order_id":"A-1"} payment:A-1:capture:4900:USD:v1
	// {"amount_cents":4900,"currency":"USD","order_id":"A-1"} payment:A-1:capture:4900:USD:v1
	// args.amount_cents: must be an integer without fraction or exponent (money goes in integer minor units, e.g. cents), got 49.00
}
