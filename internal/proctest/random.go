package proctest

import (
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"
)

// SeedEnv fixes the seed of Rand, to replay a run's "random" moments.
const SeedEnv = "OPLEDGER_PROCTEST_SEED"

// Rand returns a random source for choosing when to kill what, seeded from
// $OPLEDGER_PROCTEST_SEED or the clock; the seed is logged so that a
// failing run can be replayed.
func Rand(t testing.TB) *rand.Rand {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv(SeedEnv); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			t.Fatalf("proctest: %s=%q: %v", SeedEnv, v, err)
		}
		seed = n
	}
	t.Logf("random moments: %s=%d", SeedEnv, seed)
	return rand.New(rand.NewPCG(seed, seed>>32|1))
}
