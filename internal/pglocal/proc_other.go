//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package pglocal

import (
	"errors"
	"os"
	"syscall"
)

func serverAccount() (account, error) {
	return account{}, errors.Join(ErrUnsupported, errors.New("pglocal needs unix sockets, flock and setuid; set DATABASE_URL instead"))
}

func (account) chown(string) error                    { return ErrUnsupported }
func (account) checkReachable(string) error           { return ErrUnsupported }
func (account) sysProcAttr(bool) *syscall.SysProcAttr { return nil }
func lockDir(string) (func() error, error)            { return nil, ErrUnsupported }
func tryLockExisting(string) (func() error, error)    { return nil, ErrUnsupported }
func processAlive(int) bool                           { return false }
func memTempDir() string                              { return "" }
func interrupt(p *os.Process) error                   { return p.Kill() }
func quit(p *os.Process) error                        { return p.Kill() }
