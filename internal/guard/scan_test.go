package guard

import (
	"crypto/rand"
	"encoding/hex"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// Scan in a fresh network namespace finds the user's rules in iptables (a rule in a
// built-in chain, a jump into a user chain) and in a native nftables table, and
// none of kube-proxy's or myelin's, with the real iptables and nft.
func TestPrivilegedScan(t *testing.T) {
	testenv.RequireRoot(t, "create a network namespace")
	testenv.RequireTools(t, "ip", "iptables", "ip6tables", "nft")
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	// guardtest-*, not myelin-*: the lab's leftover checks own that prefix, and
	// test/install runs them in parallel with this package.
	name := "guardtest-" + hex.EncodeToString(b)
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	run := func(args ...string) {
		t.Helper()
		if args[0] == "iptables" || args[0] == "ip6tables" {
			// -w: wait for the xtables lock (iptables-legacy shares it
			// machine-wide with whatever else runs iptables) instead of failing.
			args = slices.Insert(args, 1, "-w")
		}
		if out, err := exec.Command("ip", append([]string{"netns", "exec", name}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	scan := func() []string {
		t.Helper()
		var found []Finding
		err := netns.Do(netns.Path(name), func() (err error) {
			found, err = Scan()
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return Places(found)
	}
	if got := scan(); len(got) != 0 {
		t.Fatalf("empty namespace: places = %v, want none", got)
	}

	// kube-proxy's and myelin's: never findings.
	run("iptables", "-t", "nat", "-N", "KUBE-SERVICES")
	run("iptables", "-t", "nat", "-A", "PREROUTING", "-j", "KUBE-SERVICES")
	run("iptables", "-t", "nat", "-A", "KUBE-SERVICES", "-d", "10.96.0.1", "-j", "RETURN")
	run("iptables", "-N", "MYELIN-FORWARD")
	run("iptables", "-A", "FORWARD", "-j", "MYELIN-FORWARD")
	run("nft", "add", "table", "ip", "kube-proxy")
	run("nft", "add", "chain", "ip", "kube-proxy", "services")
	run("nft", "add", "rule", "ip", "kube-proxy", "services", "ip", "daddr", "10.96.0.1", "accept")
	if got := scan(); len(got) != 0 {
		t.Fatalf("only kube-proxy's and myelin's rules: places = %v, want none", got)
	}

	run("iptables", "-A", "INPUT", "-p", "tcp", "--dport", "9999", "-j", "ACCEPT")
	run("iptables", "-t", "mangle", "-N", "USER")
	run("iptables", "-t", "mangle", "-A", "USER", "-j", "MARK", "--set-mark", "1")
	run("iptables", "-t", "mangle", "-A", "OUTPUT", "-j", "USER")
	run("ip6tables", "-t", "raw", "-A", "PREROUTING", "-j", "NOTRACK")
	// A built-in chain iptables cannot show (another priority): read with nft.
	run("nft", "add", "table", "ip", "raw")
	run("nft", "add", "chain", "ip", "raw", "PREROUTING", "{ type filter hook prerouting priority 10; }")
	run("nft", "add", "rule", "ip", "raw", "PREROUTING", "tcp", "dport", "53", "accept")
	run("nft", "add", "table", "inet", "mine")
	run("nft", "add", "chain", "inet", "mine", "c")
	run("nft", "add", "rule", "inet", "mine", "c", "tcp", "dport", "22", "accept")
	want := []string{"filter/INPUT", "inet mine/c", "ip raw/PREROUTING", "mangle/OUTPUT", "raw/PREROUTING"}
	if got := scan(); !reflect.DeepEqual(got, want) {
		t.Errorf("places = %v, want %v", got, want)
	}
}
