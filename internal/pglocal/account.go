package pglocal

import "fmt"

// account is the OS user initdb and postgres run as.
type account struct {
	name     string
	uid, gid uint32
	home     string
	// switchUser is set when we run as root and must drop to name.
	switchUser bool
}

func (a account) String() string { return fmt.Sprintf("%s (uid %d)", a.name, a.uid) }
