package pglocal

import "syscall"

// serverProcAttr puts the server in its own process group, so a Ctrl-C in
// the terminal reaches only us and we stop it in order (after our own
// connections have drained), and has the kernel send it SIGINT (fast
// shutdown) if we die without calling Stop (kill -9, test -timeout panic).
// Pdeathsig follows the forking OS thread; Go only retires threads locked
// with LockOSThread, which pglocal never does.
func serverProcAttr(attr *syscall.SysProcAttr) {
	attr.Setpgid = true
	attr.Pdeathsig = syscall.SIGINT
}

// memTempDir returns /dev/shm if it is a tmpfs with room for test clusters,
// else "".
func memTempDir() string {
	const (
		dir       = "/dev/shm"
		tmpfsType = 0x01021994 // TMPFS_MAGIC
		minFree   = 1 << 30
	)
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil || st.Type != tmpfsType {
		return ""
	}
	if st.Bavail*uint64(st.Bsize) < minFree {
		return ""
	}
	return dir
}
