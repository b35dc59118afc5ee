package proctest

import (
	"os"
	"strconv"
)

// SoakEnv makes the scenarios bigger than CI runs them: OPLEDGER_SOAK=1
// multiplies every batch made with Scaled by SoakFactor (and a number, e.g.
// OPLEDGER_SOAK=20, by that number). Tests that repeat a random crash do so
// Rounds() times.
const SoakEnv = "OPLEDGER_SOAK"

// SoakFactor is the multiplier of OPLEDGER_SOAK=1.
const SoakFactor = 5

// soakFactor is the multiplier in force: 1 unless OPLEDGER_SOAK is set.
func soakFactor() int {
	v := os.Getenv(SoakEnv)
	if v == "" || v == "0" {
		return 1
	}
	if n, err := strconv.Atoi(v); err == nil && n > 1 {
		return n
	}
	return SoakFactor
}

// Scaled is n for CI, and n times the soak factor under OPLEDGER_SOAK.
func Scaled(n int) int { return n * soakFactor() }

// Rounds is how many times a test repeats its random crash: 1 for CI, the
// soak factor under OPLEDGER_SOAK.
func Rounds() int { return soakFactor() }
