package netns

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// DialThrough returns a DialContext whose sockets send only through the device named
// dev (SO_BINDTODEVICE): routes through other devices, the namespace's default route
// among them, are not used, and a destination with no route through dev is taken as
// on dev's link, so a packet to it leaves by dev or not at all. Loopback addresses are
// dialed as usual (they never leave the machine). A missing dev fails the dial.
func DialThrough(dev string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	d := &net.Dialer{Control: func(_, address string, c syscall.RawConn) error {
		if ap, err := netip.ParseAddrPort(address); err == nil && ap.Addr().Unmap().IsLoopback() {
			return nil
		}
		var bindErr error
		if err := c.Control(func(fd uintptr) { bindErr = unix.BindToDevice(int(fd), dev) }); err != nil {
			return err
		}
		if bindErr != nil {
			return errors.New("send only through device " + dev + ": " + bindErr.Error())
		}
		return nil
	}}
	return d.DialContext
}
