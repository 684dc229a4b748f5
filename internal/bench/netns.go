package bench

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"

	"github.com/myelin-net/myelin/internal/netns"
)

// ProductPrefix names what `myelin bench` creates. It starts with the lab's "myelin-"
// prefix so that `myelin lab down` removes the bench's namespaces after a crash too.
const ProductPrefix = "myelin-bench-"

// Addresses of the bare veth pair: a /30 of the benchmarking range 198.18.0.0/15, inside
// the environment's own namespaces (never the root namespace).
var (
	vethClientAddr = netip.MustParsePrefix("198.19.200.1/30")
	vethServerAddr = netip.MustParsePrefix("198.19.200.2/30")
	// loopbackExtraAddr is on lo of the loopback namespace only to make name resolution
	// see an IPv4 address; traffic uses 127.0.0.1.
	loopbackExtraAddr = netip.MustParsePrefix("198.19.201.1/32")
)

// Loopback is the upper baseline: client and server in one network namespace talking
// over lo. Its namespace is <prefix>lo.
type Loopback struct {
	Prefix string
}

// Name implements Environment.
func (l *Loopback) Name() string { return "loopback" }

// Available implements Environment.
func (l *Loopback) Available() error { return netnsAvailable() }

// Setup implements Environment.
func (l *Loopback) Setup(ctx context.Context) (Endpoints, error) {
	ns := l.Prefix + "lo"
	if err := addNetNS(ctx, ns); err != nil {
		return Endpoints{}, err
	}
	// netperf resolves with AI_ADDRCONFIG, which finds no IPv4 in a namespace that has
	// only 127.0.0.1; a second address on lo satisfies it without another interface.
	for _, args := range [][]string{
		{"-n", ns, "link", "set", "lo", "up"},
		{"-n", ns, "addr", "add", loopbackExtraAddr.String(), "dev", "lo"},
	} {
		if err := ip(ctx, args...); err != nil {
			return Endpoints{}, err
		}
	}
	h := NetNSHost{Path: netns.Path(ns)}
	return Endpoints{Client: h, Server: h, ServerAddr: netip.MustParseAddr("127.0.0.1")}, nil
}

// Teardown implements Environment.
func (l *Loopback) Teardown() error { return delNetNS(l.Prefix + "lo") }

// VethPair is the same-node physical limit: a bare veth pair between two network
// namespaces, <prefix>veth-c (client) and <prefix>veth-s (server), with no routing,
// bridge or BPF in the path.
type VethPair struct {
	Prefix string
}

// Name implements Environment.
func (v *VethPair) Name() string { return "veth-pair" }

// Available implements Environment.
func (v *VethPair) Available() error { return netnsAvailable() }

func (v *VethPair) names() (client, server string) { return v.Prefix + "veth-c", v.Prefix + "veth-s" }

// Setup implements Environment. The pair is created inside the client namespace and its
// peer moved straight into the server namespace, so the root namespace never sees it.
func (v *VethPair) Setup(ctx context.Context) (Endpoints, error) {
	c, s := v.names()
	steps := [][]string{
		{"-n", c, "link", "add", "veth0", "type", "veth", "peer", "name", "veth0", "netns", s},
		{"-n", c, "addr", "add", vethClientAddr.String(), "dev", "veth0"},
		{"-n", s, "addr", "add", vethServerAddr.String(), "dev", "veth0"},
		{"-n", c, "link", "set", "veth0", "up"},
		{"-n", s, "link", "set", "veth0", "up"},
		{"-n", c, "link", "set", "lo", "up"},
		{"-n", s, "link", "set", "lo", "up"},
	}
	for _, ns := range []string{c, s} {
		if err := addNetNS(ctx, ns); err != nil {
			return Endpoints{}, err
		}
	}
	for _, args := range steps {
		if err := ip(ctx, args...); err != nil {
			return Endpoints{}, err
		}
	}
	return Endpoints{
		Client:     NetNSHost{Path: netns.Path(c)},
		Server:     NetNSHost{Path: netns.Path(s)},
		ServerAddr: vethServerAddr.Addr(),
	}, nil
}

// Teardown implements Environment; deleting the namespaces deletes the pair.
func (v *VethPair) Teardown() error {
	c, s := v.names()
	return errors.Join(delNetNS(c), delNetNS(s))
}

// ErrNotRoot is returned by Available of environments that create network namespaces.
var ErrNotRoot = errors.New("needs root (network namespaces); run as root")

func netnsAvailable() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return fmt.Errorf("needs ip from iproute2: %w", err)
	}
	return nil
}

// addNetNS creates a named namespace, replacing a leftover of a crashed run of the same
// name (the name is ours by its prefix).
func addNetNS(ctx context.Context, name string) error {
	if err := delNetNS(name); err != nil {
		return err
	}
	return ip(ctx, "netns", "add", name)
}

// delNetNS deletes a named namespace; it succeeds when the namespace is already gone.
func delNetNS(name string) error {
	if _, err := os.Stat(netns.Path(name)); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	return ip(context.Background(), "netns", "del", name)
}

func ip(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, "ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %s (%w)", strings.Join(args, " "), strings.TrimSpace(string(out)), err)
	}
	return nil
}
