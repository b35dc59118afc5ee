package store

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/opledger/opledger/db/dbsqlc"
)

// submittedOperation copies every column of operations from an
// OperationSubmitNew row: a column added to the table (and so to both
// generated types) and not copied fails here.
func TestSubmittedOperationCopiesEveryColumn(t *testing.T) {
	var row dbsqlc.OperationSubmitNewRow
	rv := reflect.ValueOf(&row).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		name := rv.Type().Field(i).Name
		switch f.Kind() {
		case reflect.String:
			f.SetString("v_" + name)
		case reflect.Int32, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Pointer:
			switch f.Type().Elem() {
			case reflect.TypeFor[string]():
				v := "p_" + name
				f.Set(reflect.ValueOf(&v))
			case reflect.TypeFor[time.Time]():
				v := time.Unix(int64(1000+i), 0)
				f.Set(reflect.ValueOf(&v))
			default:
				t.Fatalf("field %s: no test value for %s", name, f.Type())
			}
		case reflect.Struct:
			require.Equal(t, reflect.TypeFor[time.Time](), f.Type(), name)
			f.Set(reflect.ValueOf(time.Unix(int64(1000+i), 0)))
		default:
			t.Fatalf("field %s: no test value for %s", name, f.Type())
		}
	}
	o := submittedOperation(row)
	ov := reflect.ValueOf(o)
	for i := range ov.NumField() {
		name := ov.Type().Field(i).Name
		want := rv.FieldByName(name)
		require.True(t, want.IsValid(), "operations column %s is not in OperationSubmitNew's row", name)
		require.Equal(t, fmt.Sprint(want.Interface()), fmt.Sprint(ov.Field(i).Interface()), "field %s", name)
		require.False(t, ov.Field(i).IsZero(), "field %s not copied", name)
	}
}
