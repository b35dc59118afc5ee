package failpoint

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// Arm takes what a crash test sets in OPLEDGER_FAILPOINTS, and refuses a
// name or count it would never fire on. (Hit's SIGKILL is shown by the crash
// tests under services/, which arm every failpoint in a real process.)
func TestArm(t *testing.T) {
	require.NoError(t, Arm(DispatchAfterCall+"@3, "+RelayBeforeMark))
	require.True(t, armed.Load())
	require.Equal(t, map[string]int{DispatchAfterCall: 3, RelayBeforeMark: 1}, fire)
	Hit(IngestMidTx) // armed, but not this one: goes on
	Hit(DispatchAfterCall)
	Hit(DispatchAfterCall) // the third hit would kill
	require.Equal(t, 2, hits[DispatchAfterCall])

	for _, bad := range []string{"dispatch.after_cal", DispatchAfterCall + "@0", DispatchAfterCall + "@x", DispatchAfterCall + "@"} {
		require.Error(t, Arm(bad), bad)
		require.Equal(t, 2, hits[DispatchAfterCall], "a refused spec leaves what was armed")
	}
	require.NoError(t, Arm(""))
	require.False(t, armed.Load())
	Hit(DispatchAfterCall)
}
