//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package pglocal

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
)

// serverUser is the account the server runs as when we are root.
const serverUser = "postgres"

// serverAccount is the current user, or "postgres" when running as root
// (initdb and postgres refuse to run as root).
func serverAccount() (account, error) {
	if os.Geteuid() != 0 {
		a := account{uid: uint32(os.Geteuid()), gid: uint32(os.Getegid())}
		if u, err := user.LookupId(strconv.Itoa(os.Geteuid())); err == nil {
			a.name, a.home = u.Username, u.HomeDir
		} else {
			a.name = "uid " + strconv.Itoa(os.Geteuid())
		}
		return a, nil
	}
	u, err := user.Lookup(serverUser)
	if err != nil {
		return account{}, fmt.Errorf("pglocal: running as root, so the server must run as the unprivileged user %q, but: %w (create it, e.g. useradd --system %s, or run as a non-root user)",
			serverUser, err, serverUser)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return account{}, fmt.Errorf("pglocal: user %q: %w", serverUser, err)
	}
	if uid == 0 {
		return account{}, fmt.Errorf("pglocal: user %q has uid 0; postgres refuses to run as root", serverUser)
	}
	return account{name: u.Username, uid: uint32(uid), gid: uint32(gid), home: u.HomeDir, switchUser: true}, nil
}

// chown hands path to the account when we switch users.
func (a account) chown(path string) error {
	if !a.switchUser {
		return nil
	}
	return os.Chown(path, int(a.uid), int(a.gid))
}

// checkReachable verifies the account may enter every ancestor of dir: a
// root-only parent (t.TempDir(), /root) would make the server fail with a
// less helpful message.
func (a account) checkReachable(dir string) error {
	if !a.switchUser {
		return nil
	}
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		st, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("pglocal: %w", err)
		}
		if sys, ok := st.Sys().(*syscall.Stat_t); ok {
			perm := st.Mode().Perm()
			var can bool
			switch {
			case sys.Uid == a.uid:
				can = perm&0o100 != 0
			case sys.Gid == a.gid:
				can = perm&0o010 != 0
			default:
				can = perm&0o001 != 0
			}
			if !can {
				return fmt.Errorf("pglocal: the server runs as %s, which cannot enter %s (mode %v, owner uid %d); put the cluster under a directory it can reach (e.g. os.TempDir()) or chmod o+x %s",
					a, p, perm, sys.Uid, p)
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// sysProcAttr runs the child as the account; server processes also get the
// platform's lifetime tie to us (see serverProcAttr).
func (a account) sysProcAttr(server bool) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{}
	if a.switchUser {
		attr.Credential = &syscall.Credential{Uid: a.uid, Gid: a.gid}
	}
	if server {
		serverProcAttr(attr)
	}
	return attr
}

// lockDir takes an exclusive, non-blocking flock on path (created if
// needed), held until the returned func is called or the process exits.
func lockDir(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	return flock(f)
}

// tryLockExisting is lockDir for a lock file that must already exist.
func tryLockExisting(path string) (func() error, error) {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	return flock(f)
}

func flock(f *os.File) (func() error, error) {
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errors.New("locked by another process")
		}
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	return f.Close, nil // closing the file releases the lock
}

// processAlive reports whether pid exists (EPERM: exists, not ours).
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

func interrupt(p *os.Process) error { return p.Signal(os.Interrupt) }
func quit(p *os.Process) error      { return p.Signal(syscall.SIGQUIT) }
