package cniplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	types100 "github.com/containernetworking/cni/pkg/types/100"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

const checkNetNS = "/run/netns/cni-check"

// checkStdin is a CHECK's network configuration with prev as its prevResult (none
// for nil).
func checkStdin(t *testing.T, socket string, prev *types100.Result) []byte {
	t.Helper()
	conf := map[string]any{"cniVersion": "1.0.0", "name": "myelin", "type": "myelin-cni", "socket": socket}
	if prev != nil {
		conf["prevResult"] = prev
	}
	b, err := json.Marshal(conf)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// parsePrev runs parsePrevResult on a CHECK's configuration with prev.
func parsePrev(t *testing.T, prev *types100.Result) (prevAttachment, error) {
	t.Helper()
	conf, err := parseConf(checkStdin(t, "/run/myelin/agent.sock", prev))
	if err != nil {
		t.Fatal(err)
	}
	return parsePrevResult(conf, "eth0", checkNetNS)
}

func checkEndpoint() api.Endpoint {
	return api.Endpoint{PodRef: api.PodRef{ContainerID: "ctr-check", IfName: "eth0", NetNS: checkNetNS, Namespace: "default", Pod: "p"},
		IP: "10.244.7.9", HostIfName: api.HostIfName("ctr-check"), HostMAC: "02:00:00:00:00:aa", PodMAC: "02:00:00:00:00:bb"}
}

// A CHECK needs a prevResult that is this attachment's: missing, unreadable, or not
// naming CNI_IFNAME in CNI_NETNS, it is refused as invalid configuration (code 7)
// naming "prevResult", what is wrong and what to do.
func TestParsePrevResult(t *testing.T) {
	ep := checkEndpoint()
	for _, c := range []struct {
		name   string
		change func(r *types100.Result) *types100.Result
		want   string // in details; "" for success
	}{
		{"the ADD's result", func(r *types100.Result) *types100.Result { return r }, ""},
		{"missing", func(*types100.Result) *types100.Result { return nil }, `"prevResult" is missing`},
		{"empty", func(*types100.Result) *types100.Result { return &types100.Result{CNIVersion: "1.0.0"} }, `lists no interface "eth0" in sandbox "/run/netns/cni-check"`},
		{"another interface name", func(r *types100.Result) *types100.Result { r.Interfaces[1].Name = "net1"; return r },
			`lists no interface "eth0" in sandbox "/run/netns/cni-check" (CNI_IFNAME, CNI_NETNS), so it is not this attachment's; it lists "myl`},
		{"another sandbox", func(r *types100.Result) *types100.Result { r.Interfaces[1].Sandbox = "/run/netns/other"; return r },
			`it lists "` + ep.HostIfName + `" on the node, "eth0" in "/run/netns/other"`},
		{"a MAC that is none", func(r *types100.Result) *types100.Result { r.Interfaces[1].Mac = "zz"; return r }, `interface "eth0" with MAC "zz", which is no MAC address`},
		{"an address of no interface", func(r *types100.Result) *types100.Result { r.IPs[0].Interface = types100.Int(5); return r },
			"ips[0] (10.244.7.9/32) names interface 5, but it lists 2 interfaces"},
		{"no address of the pod", func(r *types100.Result) *types100.Result { r.IPs = nil; return r }, "lists no address of interface eth0"},
		{"a null interface", func(r *types100.Result) *types100.Result { r.Interfaces = append(r.Interfaces, nil); return r }, "interfaces[2] is null"},
		{"a null address", func(r *types100.Result) *types100.Result { r.IPs = append(r.IPs, nil); return r }, "ips[1] is null"},
		{"a null route", func(r *types100.Result) *types100.Result {
			r.Routes = append([]*types.Route{nil}, r.Routes...)
			return r
		}, "routes[0] is null"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := parsePrev(t, c.change(ResultOf(ep)))
			var ce *types.Error
			switch {
			case c.want == "" && err != nil:
				t.Errorf("parsePrevResult = %v, want success", err)
			case c.want != "" && (!errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig ||
				!strings.Contains(ce.Details, c.want) || !strings.Contains(ce.Details, "pass the ADD's output")):
				t.Errorf("parsePrevResult = %v, want code 7 saying %q and what to do", err, c.want)
			}
		})
	}
}

// podNetOf is the pod namespace ep's ADD leaves.
func podNetOf(ep api.Endpoint) netState {
	mac, _ := net.ParseMAC(ep.PodMAC)
	hostMAC, _ := net.ParseMAC(ep.HostMAC)
	return netState{
		links: map[string]linkState{"lo": {}, "eth0": {mac: mac, addrs: []netip.Prefix{netip.MustParsePrefix(ep.IP + "/32")}}},
		routes: []routeState{
			{dst: netip.MustParsePrefix(api.PodGateway + "/32"), dev: "eth0"},
			{dst: netip.MustParsePrefix("0.0.0.0/0"), gw: netip.MustParseAddr(api.PodGateway), dev: "eth0"},
		},
		neighs: []neighState{{ip: netip.MustParseAddr(api.PodGateway), dev: "eth0", mac: hostMAC, permanent: true}},
	}
}

// Each way the pod's network can differ from prevResult and the agent's record is
// named: interface, MAC, address, route, gateway neighbour, host veth.
func TestPodProblems(t *testing.T) {
	ep := checkEndpoint()
	hostMAC, _ := net.ParseMAC(ep.HostMAC)
	for _, c := range []struct {
		name   string
		prev   func(r *types100.Result)
		podNet func(s *netState)
		host   namedLink
		want   []string
	}{
		{name: "as the ADD left it"},
		{name: "prevResult names another IP", prev: func(r *types100.Result) { r.IPs[0].Address.IP = net.ParseIP("10.244.7.10") },
			want: []string{"address 10.244.7.10/32 (prevResult) is not on eth0 (it has 10.244.7.9/32)",
				"prevResult gives eth0 10.244.7.10/32, the agent's endpoint has 10.244.7.9"}},
		{name: "prevResult names another MAC", prev: func(r *types100.Result) { r.Interfaces[1].Mac = "02:00:00:00:00:CC" },
			want: []string{"interface eth0 has MAC 02:00:00:00:00:bb, prevResult lists 02:00:00:00:00:cc"}},
		{name: "prevResult names an interface that is not there", prev: func(r *types100.Result) {
			r.Interfaces = append(r.Interfaces, &types100.Interface{Name: "net1", Sandbox: checkNetNS})
		}, want: []string{`interface "net1" (prevResult) is not in the pod's network namespace`}},
		{name: "a route is gone", podNet: func(s *netState) { s.routes = s.routes[:1] },
			want: []string{"route 0.0.0.0/0 via 169.254.1.1 (prevResult) is not in the pod's network namespace",
				"interface eth0 has no default route via 169.254.1.1"}},
		{name: "the host veth's MAC changed", host: namedLink{name: ep.HostIfName, mac: net.HardwareAddr{2, 0, 0, 0, 0, 0xdd}},
			want: []string{"host veth " + ep.HostIfName + " has MAC 02:00:00:00:00:dd, prevResult lists 02:00:00:00:00:aa"}},
		{name: "prevResult is another container's", prev: func(r *types100.Result) { r.Interfaces[0].Name = api.HostIfName("ctr-other") },
			want: []string{`prevResult lists host veth "` + api.HostIfName("ctr-other") + `", the agent's endpoint has ` + ep.HostIfName + " (prevResult is another container's)"}},
		{name: "the agent's MAC differs", podNet: func(s *netState) {
			mac, _ := net.ParseMAC("02:00:00:00:00:ee")
			s.links["eth0"] = linkState{mac: mac, addrs: s.links["eth0"].addrs}
		}, prev: func(r *types100.Result) { r.Interfaces[1].Mac = "02:00:00:00:00:ee" },
			want: []string{"interface eth0 has MAC 02:00:00:00:00:ee, the agent recorded 02:00:00:00:00:bb"}},
		{name: "the gateway's neighbour entry is gone", podNet: func(s *netState) { s.neighs = nil },
			want: []string{"interface eth0 has no neighbour entry for its gateway 169.254.1.1, ADD made one (permanent, at the host veth's MAC 02:00:00:00:00:aa)"}},
		{name: "the gateway's neighbour entry points elsewhere", podNet: func(s *netState) {
			s.neighs[0].mac, s.neighs[0].permanent = net.HardwareAddr{2, 0, 0, 0, 0, 0xcc}, false
		}, want: []string{"interface eth0 has neighbour 169.254.1.1 at 02:00:00:00:00:cc (not permanent), ADD made it permanent at the host veth's MAC 02:00:00:00:00:aa"}},
		{name: "the pod interface is gone", podNet: func(s *netState) { delete(s.links, "eth0") },
			want: []string{"interface eth0 is not in the pod's network namespace /run/netns/cni-check"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := ResultOf(ep)
			if c.prev != nil {
				c.prev(res)
			}
			prev, err := parsePrev(t, res)
			if err != nil {
				t.Fatal(err)
			}
			podNet := podNetOf(ep)
			if c.podNet != nil {
				c.podNet(&podNet)
			}
			host := c.host
			if host.name == "" {
				host = namedLink{name: ep.HostIfName, mac: hostMAC}
			}
			got := podProblems(prev, &skel.CmdArgs{IfName: "eth0", Netns: checkNetNS}, podNet, host, ep)
			if fmt.Sprint(got) != fmt.Sprint(c.want) {
				t.Errorf("problems:\n%q\nwant\n%q", got, c.want)
			}
		})
	}
}

// checkAgent serves ep and a datapath without problems, as the agent does.
func checkAgent(t *testing.T, ep api.Endpoint) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/endpoints/{id}", func(w http.ResponseWriter, r *http.Request) {
		if r.PathValue("id") != ep.ContainerID {
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: "no endpoint"})
			return
		}
		_ = json.NewEncoder(w).Encode(ep)
	})
	mux.HandleFunc("GET /v1/endpoints/{id}/check", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(api.EndpointCheck{})
	})
	return testenv.ServeUnixHTTP(t, mux.ServeHTTP)
}

// CHECK of a real pod interface compares it with prevResult: the ADD's result
// passes; a prevResult naming another IP, another MAC, or an interface that is not
// there fails (code 999) naming the difference; none at all is invalid (code 7).
// Before, CHECK ignored prevResult and passed them all.
func TestPrivilegedCheckComparesPrevResult(t *testing.T) {
	requireRoot(t)
	const id = "ctr-check"
	host, pod, ep, socket := checkedPod(t, id)
	for _, c := range []struct {
		name   string
		change func(r *types100.Result) *types100.Result
		code   uint
		want   string
	}{
		{"the ADD's result", func(r *types100.Result) *types100.Result { return r }, 0, ""},
		{"another IP", func(r *types100.Result) *types100.Result { r.IPs[0].Address.IP = net.ParseIP("10.244.7.10"); return r },
			types.ErrInternal, "address 10.244.7.10/32 (prevResult) is not on eth0 (it has 10.244.7.9/32)"},
		{"another MAC", func(r *types100.Result) *types100.Result { r.Interfaces[1].Mac = "02:00:00:00:00:01"; return r },
			types.ErrInternal, "interface eth0 has MAC " + ep.PodMAC + ", prevResult lists 02:00:00:00:00:01"},
		{"an interface that is not there", func(r *types100.Result) *types100.Result {
			r.Interfaces = append(r.Interfaces, &types100.Interface{Name: "net1", Mac: "02:00:00:00:00:02", Sandbox: pod})
			return r
		}, types.ErrInternal, `interface "net1" (prevResult) is not in the pod's network namespace`},
		{"none", func(*types100.Result) *types100.Result { return nil }, types.ErrInvalidNetworkConfig, `"prevResult" is missing`},
	} {
		t.Run(c.name, func(t *testing.T) {
			args := cniArgs(socket, id, pod)
			args.StdinData = checkStdin(t, socket, c.change(ResultOf(ep)))
			err := netns.Do(host, func() error { return cmdCheck(args) })
			var ce *types.Error
			switch {
			case c.code == 0 && err != nil:
				t.Errorf("CHECK with the ADD's result = %v, want success", err)
			case c.code != 0 && (!errors.As(err, &ce) || ce.Code != c.code || !strings.Contains(ce.Details, c.want)):
				t.Errorf("CHECK with prevResult of %s = %v, want code %d saying %q", c.name, err, c.code, c.want)
			case c.code == types.ErrInternal && !strings.Contains(ce.Details, "pod default/"+id):
				t.Errorf("CHECK error %q does not name the pod", ce.Details)
			}
		})
	}
}

// What a pod with NET_ADMIN can change in its own namespace after ADD, CHECK reports
// (code 999, naming it): its MAC, its address, its interface's name, its default
// route, its gateway's neighbour entry. Before, a deleted or changed neighbour entry
// (which cuts the pod off: nothing answers ARP for the gateway) passed.
func TestPrivilegedCheckSeesPodChanges(t *testing.T) {
	requireRoot(t)
	gw := net.ParseIP(api.PodGateway)
	for _, c := range []struct {
		name   string
		change func(l netlink.Link) error
		want   string
	}{
		{"MAC", func(l netlink.Link) error {
			return netlink.LinkSetHardwareAddr(l, net.HardwareAddr{2, 0, 0, 0, 0, 0x77})
		},
			"interface eth0 has MAC 02:00:00:00:00:77"},
		{"address", func(l netlink.Link) error {
			return netlink.AddrDel(l, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP("10.244.7.9"), Mask: net.CIDRMask(32, 32)}})
		}, "interface eth0 lacks its address 10.244.7.9/32"},
		{"name", func(l netlink.Link) error {
			if err := netlink.LinkSetDown(l); err != nil {
				return err
			}
			return netlink.LinkSetName(l, "eth1")
		}, "interface eth0 is not in the pod's network namespace"},
		{"default route", func(l netlink.Link) error {
			return netlink.RouteDel(&netlink.Route{LinkIndex: l.Attrs().Index, Gw: gw})
		},
			"interface eth0 has no default route via 169.254.1.1"},
		{"gateway neighbour gone", func(l netlink.Link) error {
			return netlink.NeighDel(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET, IP: gw})
		}, "interface eth0 has no neighbour entry for its gateway 169.254.1.1"},
		{"gateway neighbour elsewhere", func(l netlink.Link) error {
			return netlink.NeighSet(&netlink.Neigh{LinkIndex: l.Attrs().Index, Family: unix.AF_INET, State: netlink.NUD_PERMANENT,
				IP: gw, HardwareAddr: net.HardwareAddr{2, 0, 0, 0, 0, 0x66}})
		}, "interface eth0 has neighbour 169.254.1.1 at 02:00:00:00:00:66 (permanent)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			const id = "ctr-changed"
			host, pod, ep, socket := checkedPod(t, id)
			args := cniArgs(socket, id, pod)
			args.StdinData = checkStdin(t, socket, ResultOf(ep))
			if err := netns.Do(host, func() error { return cmdCheck(args) }); err != nil {
				t.Fatalf("CHECK as ADD left the pod: %v", err)
			}
			err := netns.Do(pod, func() error {
				l, err := netlink.LinkByName("eth0")
				if err != nil {
					return err
				}
				return c.change(l)
			})
			if err != nil {
				t.Fatalf("change the pod's %s: %v", c.name, err)
			}
			err = netns.Do(host, func() error { return cmdCheck(args) })
			var ce *types.Error
			if !errors.As(err, &ce) || ce.Code != types.ErrInternal || !strings.Contains(ce.Details, c.want) {
				t.Errorf("CHECK after the pod changed its %s = %v, want code 999 saying %q", c.name, err, c.want)
			}
		})
	}
}

// checkedPod builds pod id's veth between two throwaway namespaces as ADD does and
// serves its endpoint from a test agent: the host and pod namespaces, the endpoint and
// the agent's socket.
func checkedPod(t *testing.T, id string) (host, pod string, ep api.Endpoint, socket string) {
	t.Helper()
	host, pod = throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	ip := netip.MustParseAddr("10.244.7.9")
	err := netns.Do(host, func() error {
		l, err := setupVeth(pod, "eth0", api.HostIfName(id), 1500, 1500, 0, ip, netip.MustParseAddr(api.PodGateway))
		ep = apiEndpoint(ip, l)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	ep.PodRef = api.PodRef{ContainerID: id, IfName: "eth0", NetNS: pod, Namespace: "default", Pod: id}
	ep.HostIfName = api.HostIfName(id)
	return host, pod, ep, checkAgent(t, ep)
}
