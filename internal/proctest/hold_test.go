package proctest

import (
	"errors"
	"net"
	"syscall"
	"testing"
	"time"
)

// freePort returns a loopback address nothing listens on; with closeFirst,
// a connection to it was closed by the listening side first, so that its
// end waits in TIME_WAIT on that port, as a cut link's connections do.
func freePort(t *testing.T, closeFirst bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if closeFirst {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		_ = s.Close()
		time.Sleep(10 * time.Millisecond)
		_ = c.Close()
	}
	return ln.Addr().String()
}

// bindPlain binds a TCP socket to addr without SO_REUSEADDR and closes it.
func bindPlain(t *testing.T, addr string) error {
	t.Helper()
	tcp, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(fd)
	return syscall.Bind(fd, &syscall.SockaddrInet4{Port: tcp.Port, Addr: [4]byte(tcp.IP.To4())})
}

// A held port is taken (a socket that does not ask to share it cannot bind
// there) and refuses connections, as a cut link must; once released it is
// free again.
func TestHeldPortIsTakenAndRefuses(t *testing.T) {
	addr := freePort(t, false)
	release, err := holdPort(addr)
	if err != nil {
		t.Fatalf("hold %s: %v", addr, err)
	}
	if err := bindPlain(t, addr); !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("bind a held port: got %v, want address already in use", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial a held port: got %v, want connection refused", err)
	}
	release()
	if err := bindPlain(t, addr); err != nil {
		t.Fatalf("bind a released port: %v", err)
	}
}

// A link's port can be held beside its closed connections in TIME_WAIT,
// and listened on again once released.
func TestHeldPortBesideTimeWaitReopens(t *testing.T) {
	addr := freePort(t, true)
	release, err := holdPort(addr)
	if err != nil {
		t.Fatalf("hold %s beside a connection in TIME_WAIT: %v", addr, err)
	}
	release()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s after release: %v", addr, err)
	}
	_ = ln.Close()
}
