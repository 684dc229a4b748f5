package datapath

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/testenv"
)

// TC verdicts as returned by the programs.
const (
	tcActOK       = 0
	tcActShot     = 2
	tcActRedirect = 7
)

// requirePrivileged skips tests that need root (BPF, bpffs, netns).
func requirePrivileged(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "load BPF and mount bpffs")
}

func randomSuffix() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// testPinDir mounts a private bpffs for the test and returns a pin dir on it;
// the mount and everything pinned in it go away when the test ends.
func testPinDir(t testing.TB) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "dptest-"+randomSuffix())
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("bpf", mnt, "bpf", 0, "mode=0700"); err != nil {
		t.Fatalf("mount bpffs on %s: %v", mnt, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", mnt, err)
		}
	})
	return filepath.Join(mnt, "node")
}

// loadTest loads a datapath into a fresh pin dir, closed and unpinned at cleanup.
func loadTest(t *testing.T, routing HostRouting) *Datapath {
	t.Helper()
	return loadTestConfig(t, Config{HostRouting: routing})
}

// agentDefaultConfig is what an agent loads by default (BPF host routing, load
// balancing, masquerade, native routing, this node's PodCIDR checked where other
// hosts' packets come in: pods A and B are in it), without a pin dir.
func agentDefaultConfig() Config {
	return Config{HostRouting: HostRoutingBPF, LoadBalancing: true, Masquerade: true, NodeIP: testNodeIP,
		ClusterCIDR: lbClusterCIDR, MaglevTableSize: 16381, NATPortMin: 61000, NATPortMax: 65535,
		PolicyCTPodMax: 131072 / 4, NATPodMax: 8192, LBCTPodMax: 32768, LocalPodCIDR: testLocalPodCIDR}
}

// testLocalPodCIDR is the test node's PodCIDR (pods A and B, the health address).
var testLocalPodCIDR = netip.MustParsePrefix("10.1.0.0/24")

// loadTestConfig is loadTest with cfg; its PinDir is set to a fresh pin dir.
// Drop events are switched on.
func loadTestConfig(t testing.TB, cfg Config) *Datapath {
	t.Helper()
	dir := testPinDir(t)
	cfg.PinDir = dir
	d, err := Load(cfg)
	if err != nil {
		var verr *ebpf.VerifierError
		if errors.As(err, &verr) {
			t.Fatalf("load: %+v", verr)
		}
		t.Fatalf("load: %v", err)
	}
	t.Cleanup(func() {
		d.Close()
		if err := Unpin(dir); err != nil {
			t.Error(err)
		}
	})
	// As if a monitor client wanted drops, so tests can read drop events;
	// TestPrivilegedBPFDropEventsGated covers the off state a Load starts in.
	if err := d.SetDropEvents(true); err != nil {
		t.Fatal(err)
	}
	return d
}

// counter returns one summed metrics row (zero if absent).
func counter(d *Datapath, dir, reason string) (Metric, error) {
	ms, err := d.Metrics()
	if err != nil {
		return Metric{}, err
	}
	for _, m := range ms {
		if m.Direction == dir && m.Reason == reason {
			return m, nil
		}
	}
	return Metric{Direction: dir, Reason: reason}, nil
}

// seedEndpoints makes the endpoints map hold exactly eps.
func seedEndpoints(d *Datapath, eps map[string]EndpointInfo) error {
	old, err := d.Endpoints()
	if err != nil {
		return err
	}
	// Only what eps lacks is deleted: DeleteEndpoint also clears the
	// address's NetworkPolicy flags, which policy tests seed beforehand.
	for ip := range old {
		if _, keep := eps[ip.String()]; keep {
			continue
		}
		if err := d.DeleteEndpoint(ip); err != nil {
			return err
		}
	}
	for ip, ep := range eps {
		if err := d.UpsertEndpoint(netip.MustParseAddr(ip), ep); err != nil {
			return err
		}
	}
	return nil
}

// seedTunnels makes the tunnel map hold exactly tunnels (PodCIDR -> node IP).
func seedTunnels(d *Datapath, tunnels map[string]string) error {
	old, err := d.Tunnels()
	if err != nil {
		return err
	}
	for p := range old {
		if err := d.DeleteTunnel(p); err != nil {
			return err
		}
	}
	for p, node := range tunnels {
		if err := d.UpsertTunnel(netip.MustParsePrefix(p), netip.MustParseAddr(node)); err != nil {
			return err
		}
	}
	return nil
}

// errNoEvent is nextEvent's timeout.
var errNoEvent = errors.New("no event before the deadline")

// nextEvent reads one event, or fails with errNoEvent after timeout.
func nextEvent(r *EventReader, timeout time.Duration) (Event, error) {
	r.rd.SetDeadline(time.Now().Add(timeout))
	ev, err := r.Read()
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return Event{}, errNoEvent
	}
	return ev, err
}

// drainEvents discards the events already in the ring buffer.
func drainEvents(r *EventReader) error {
	for {
		_, err := nextEvent(r, 10*time.Millisecond)
		if errors.Is(err, errNoEvent) {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// readEvent is nextEvent for the test goroutine: false on timeout.
func readEvent(t *testing.T, r *EventReader, timeout time.Duration) (Event, bool) {
	t.Helper()
	ev, err := nextEvent(r, timeout)
	if errors.Is(err, errNoEvent) {
		return Event{}, false
	}
	if err != nil {
		t.Fatalf("read event: %v", err)
	}
	return ev, true
}

// inNetns runs fn inside a new netns dptest-<random> (testenv.InNetns).
func inNetns(t testing.TB, fn func(nsName string)) { testenv.InNetns(t, "dptest-", fn) }
