package datapath

import (
	"errors"
	"fmt"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// ProbeTunnelProtocol checks that the kernel can create the overlay device
// of a tunnel-protocol setting, "vxlan" or "geneve", by creating a
// collect-metadata (external) device of that kind in a throwaway network
// namespace that is gone when the probe returns; the caller's namespace is
// never touched. A kernel built without the driver fails with an error
// naming the missing CONFIG_ option. Needs CAP_NET_ADMIN and CAP_SYS_ADMIN.
func ProbeTunnelProtocol(proto string) error {
	var (
		dev    netlink.Link
		kind   string
		option string
	)
	attrs := netlink.LinkAttrs{Name: "myelin_probe"}
	switch proto {
	case "vxlan":
		dev, kind, option = &netlink.Vxlan{LinkAttrs: attrs, FlowBased: true, Port: 8472}, "VXLAN", "CONFIG_VXLAN"
	case "geneve":
		dev, kind, option = &netlink.Geneve{LinkAttrs: attrs, FlowBased: true}, "Geneve", "CONFIG_GENEVE"
	default:
		return fmt.Errorf("tunnel-protocol %q: unknown: use vxlan or geneve", proto)
	}
	err := inThrowawayNetns(func() error { return netlink.LinkAdd(dev) })
	if errors.Is(err, unix.EOPNOTSUPP) {
		return fmt.Errorf("tunnel-protocol %s: this kernel cannot create %s devices (%s missing: %w)", proto, kind, option, err)
	}
	if err != nil {
		return fmt.Errorf("tunnel-protocol %s: probe %s device: %w", proto, kind, err)
	}
	return nil
}

// inThrowawayNetns runs fn on a locked OS thread moved into a new, unnamed
// network namespace. The thread is never handed back to the Go scheduler:
// its goroutine exits still locked, so the runtime discards the thread and
// the namespace (and whatever fn created in it) dies with it.
func inThrowawayNetns(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.New() // unshare(CLONE_NEWNET): this thread only
		if err != nil {
			errc <- fmt.Errorf("create throwaway netns: %w", err)
			return
		}
		ns.Close()
		errc <- fn()
	}()
	return <-errc
}
