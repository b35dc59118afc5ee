package proctest

import (
	"fmt"
	"net/netip"
	"syscall"
)

// holdPort binds a TCP socket to addr (an IPv4 loopback host:port) without
// listening on it, and returns what releases it. While it is held, a
// connection to addr is refused, as with nothing bound there, but the port
// is not free: no other listener on port 0 and no outgoing connection of
// any process can be given it. A link that is cut keeps its port this way,
// so that restoring it can listen there again. (Closing the listener and
// reopening it later once lost the port to another test's listener,
// "bind: address already in use", and failed the test.)
//
// SO_REUSEADDR lets the bind succeed beside the link's own connections in
// TIME_WAIT; the kernel still never hands out a port that a socket is bound
// to.
func holdPort(addr string) (release func(), err error) {
	ap, err := netip.ParseAddrPort(addr)
	if err != nil || !ap.Addr().Is4() {
		return nil, fmt.Errorf("hold port: want an IPv4 host:port, got %q", addr)
	}
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, fmt.Errorf("hold port %s: socket: %w", addr, err)
	}
	syscall.CloseOnExec(fd)
	if err := syscall.SetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_REUSEADDR, 1); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold port %s: SO_REUSEADDR: %w", addr, err)
	}
	if err := syscall.Bind(fd, &syscall.SockaddrInet4{Port: int(ap.Port()), Addr: ap.Addr().As4()}); err != nil {
		_ = syscall.Close(fd)
		return nil, fmt.Errorf("hold port %s: bind: %w", addr, err)
	}
	return func() { _ = syscall.Close(fd) }, nil
}
