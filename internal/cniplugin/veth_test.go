package cniplugin

import (
	"crypto/rand"
	"encoding/hex"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// throwawayNetNS makes a named netns (cnitest-*: not myelin-*, which the lab's leftover
// checks and `lab down` own, while test packages run in parallel with the e2e labs) and
// removes it when the test ends.
func throwawayNetNS(t *testing.T, role string) string {
	t.Helper()
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	name := "cnitest-" + role + "-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", name, err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	return "/run/netns/" + name
}

func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "create network namespaces")
}

// TestPrivilegedVethSetupAndTeardown builds a pod's veth between two throwaway
// namespaces and checks the pod side (address, gateway neighbour, default route) and
// the host side, then tears it down twice.
func TestPrivilegedVethSetupAndTeardown(t *testing.T) {
	requireRoot(t)
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	ip, gw := netip.MustParseAddr("10.244.7.9"), netip.MustParseAddr(api.PodGateway)
	const hostIf = "myltest0000001"
	var link podLink
	err := netns.Do(host, func() (err error) {
		link, err = setupVeth(pod, "eth0", hostIf, 1400, 1350, 0, ip, gw)
		if err != nil {
			return err
		}
		l, err := netlink.LinkByName(hostIf)
		if err != nil {
			return err
		}
		if l.Attrs().Index != link.HostIndex || l.Attrs().HardwareAddr.String() != link.HostMAC.String() ||
			l.Attrs().OperState == netlink.OperDown || l.Attrs().MTU != 1400 {
			t.Errorf("host veth %+v, setup returned index %d MAC %s", l.Attrs(), link.HostIndex, link.HostMAC)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	err = netns.Do(pod, func() error {
		l, err := netlink.LinkByName("eth0")
		if err != nil {
			return err
		}
		addrs, _ := netlink.AddrList(l, unix.AF_INET)
		if len(addrs) != 1 || addrs[0].IPNet.String() != "10.244.7.9/32" {
			t.Errorf("pod addresses %v, want 10.244.7.9/32", addrs)
		}
		neighs, _ := netlink.NeighList(l.Attrs().Index, unix.AF_INET)
		found := false
		for _, n := range neighs {
			found = found || (n.IP.Equal(net.ParseIP(api.PodGateway)) && n.State == netlink.NUD_PERMANENT &&
				n.HardwareAddr.String() == link.HostMAC.String())
		}
		if !found {
			t.Errorf("pod neighbours %v, want %s -> %s permanent", neighs, api.PodGateway, link.HostMAC)
		}
		routes, _ := netlink.RouteList(l, unix.AF_INET)
		mtuOK := false
		for _, r := range routes {
			mtuOK = mtuOK || (r.Gw != nil && r.MTU == 1350)
		}
		if !mtuOK {
			t.Errorf("pod routes %v, want the default route with MTU 1350", routes)
		}
		state, err := readNetState()
		if err != nil {
			return err
		}
		if problems := agentProblems(apiEndpoint(ip, link), "eth0", state); len(problems) > 0 {
			t.Errorf("CHECK's view of the new pod interface: %v, want no problem", problems)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if err := deletePodLink(pod, "eth0"); err != nil {
			t.Fatalf("deletePodLink #%d: %v", i+1, err)
		}
	}
	_ = netns.Do(host, func() error {
		if _, err := netlink.LinkByName(hostIf); err == nil {
			t.Error("host veth still exists after the pod side was deleted")
		}
		return nil
	})
	if err := deletePodLink("/run/netns/myelin-test-no-such-netns", "eth0"); err != nil {
		t.Errorf("deletePodLink with the netns gone: %v, want success", err)
	}
}

// TestPrivilegedVethHostSideNoIPv6: the host side of a pod's veth takes no
// router advertisements, autoconfigures nothing and has no IPv6 address at
// all, though the throwaway netns's defaults (accept_ra 1, autoconf 1,
// addr_gen_mode 0) would give it a link-local address when it goes up.
func TestPrivilegedVethHostSideNoIPv6(t *testing.T) {
	requireRoot(t)
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	const hostIf = "myltest0000002"
	err := netns.Do(host, func() error {
		for key, want := range map[string]string{"accept_ra": "1", "autoconf": "1", "addr_gen_mode": "0", "disable_ipv6": "0"} {
			if got := readSysctl(t, "default", key); got != want {
				t.Logf("netns default %s = %s (not the kernel default %s): the test still checks the veth", key, got, want)
			}
		}
		if _, err := setupVeth(pod, "eth0", hostIf, 1500, 1500, 0, netip.MustParseAddr("10.244.7.10"), netip.MustParseAddr(api.PodGateway)); err != nil {
			return err
		}
		for _, s := range hostVethIPv6 {
			if got := readSysctl(t, hostIf, s.key); got != s.value {
				t.Errorf("host veth %s: %s = %q, want %q", hostIf, s.key, got, s.value)
			}
		}
		l, err := netlink.LinkByName(hostIf)
		if err != nil {
			return err
		}
		if l.Attrs().Flags&net.FlagUp == 0 {
			t.Errorf("host veth %s is not up", hostIf)
		}
		addrs, err := netlink.AddrList(l, unix.AF_INET6)
		if err != nil {
			return err
		}
		if len(addrs) != 0 {
			t.Errorf("host veth %s has IPv6 addresses %v, want none", hostIf, addrs)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// readSysctl reads net.ipv6.conf.<dev>.<key> of the current netns.
func readSysctl(t *testing.T, dev, key string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/net/ipv6/conf/" + dev + "/" + key)
	if err != nil {
		t.Fatalf("read %s of %s: %v", key, dev, err)
	}
	return strings.TrimSpace(string(b))
}

// A second ADD for the same container (the same host veth name into the same pod
// netns, which the CNI spec forbids without a DEL between, but a runtime's retry can
// send) fails creating the pair, and its cleanup leaves the first ADD's live veth.
func TestPrivilegedVethSecondAddKeepsLivePair(t *testing.T) {
	requireRoot(t)
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	ip, gw := netip.MustParseAddr("10.244.7.9"), netip.MustParseAddr(api.PodGateway)
	const hostIf = "myltest0000009"
	err := netns.Do(host, func() error {
		first, err := setupVeth(pod, "eth0", hostIf, 1400, 1350, 0, ip, gw)
		if err != nil {
			return err
		}
		if _, err := setupVeth(pod, "eth0", hostIf, 1400, 1350, 0, ip, gw); err == nil || !strings.Contains(err.Error(), "CNI_IFNAME eth0 exists already") {
			t.Errorf("a second setupVeth with the same names = %v, want an error saying CNI_IFNAME eth0 exists already", err)
		}
		if _, err := setupVeth(pod, "eth1", hostIf, 1400, 1350, 0, ip, gw); err == nil || !strings.Contains(err.Error(), "host veth "+hostIf+" exists already") {
			t.Errorf("setupVeth with the same host veth = %v, want an error saying host veth %s exists already", err, hostIf)
		}
		l, err := netlink.LinkByName(hostIf)
		if err != nil || l.Attrs().Index != first.HostIndex {
			t.Errorf("after the failed second ADD, host veth %s: %v (want index %d, the first ADD's)", hostIf, err, first.HostIndex)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
