//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package pglocal

import "syscall"

// serverProcAttr leaves the server in our process group: without Linux's
// parent-death signal, sharing Ctrl-C with us is what stops it if we are
// interrupted before Stop.
func serverProcAttr(*syscall.SysProcAttr) {}

// memTempDir: no conventional memory-backed temp dir here.
func memTempDir() string { return "" }
