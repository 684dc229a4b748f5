package agent

import (
	"errors"
	"io"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/service"
)

// fakeServiceDP is the Service maps as Go maps, and the flows the GC asked to end.
type fakeServiceDP struct {
	services map[datapath.Frontend]datapath.Service
	backends map[uint32]datapath.Backend
	ended    []map[datapath.ServiceBackend]bool // one per EndServiceFlows call
	endErr   error
}

func (f *fakeServiceDP) UpsertBackend(id uint32, b datapath.Backend) error {
	f.backends[id] = b
	return nil
}
func (f *fakeServiceDP) DeleteBackend(id uint32) error { delete(f.backends, id); return nil }
func (f *fakeServiceDP) UpsertService(fe datapath.Frontend, s datapath.Service) error {
	f.services[fe] = s
	return nil
}
func (f *fakeServiceDP) DeleteService(fe datapath.Frontend) error   { delete(f.services, fe); return nil }
func (f *fakeServiceDP) Services() ([]datapath.ServiceEntry, error) { return nil, nil }
func (f *fakeServiceDP) Backends() (map[uint32]datapath.Backend, error) {
	return map[uint32]datapath.Backend{}, nil
}
func (f *fakeServiceDP) ConntrackIDs() (services, backends []uint32, err error) { return nil, nil, nil }
func (f *fakeServiceDP) ServiceCapacity() (frontends, slots int)                { return 0, 0 }
func (f *fakeServiceDP) EndServiceFlows(pairs map[datapath.ServiceBackend]bool) (int, error) {
	f.ended = append(f.ended, maps.Clone(pairs))
	return 2 * len(pairs), f.endErr
}

// The GC round ends the flows of a backend that left a Service while another
// Service (a hand-made EndpointSlice in another namespace) keeps it: it asks the
// datapath to end exactly the pair (the first Service's frontend id, the backend's
// id), then forgets it; on an error it asks again next round; with nothing
// departed it does not walk the tables at all.
func TestCollectorEndsDepartedFlows(t *testing.T) {
	dp := &fakeServiceDP{services: map[datapath.Frontend]datapath.Service{}, backends: map[uint32]datapath.Backend{}}
	m, err := service.NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	c := &collector{log: slog.New(slog.NewTextHandler(io.Discard, nil)), loops: newLoops()}
	c.useServices(m)
	x := datapath.Backend{Addr: netip.MustParseAddr("10.244.1.5"), Port: 53}
	y := datapath.Backend{Addr: netip.MustParseAddr("10.244.2.5"), Port: 53}
	fe := func(ip string, bs ...datapath.Backend) service.Frontend {
		return service.Frontend{Key: datapath.Frontend{Addr: netip.MustParseAddr(ip), Port: 53, Proto: unix.IPPROTO_UDP},
			Type: service.ClusterIP, Active: bs}
	}
	s1, s2 := fe("10.96.0.10", x, y), fe("10.96.0.20", x)
	if err := m.Apply("a/s1", []service.Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("b/s2", []service.Frontend{s2}); err != nil {
		t.Fatal(err)
	}
	if n, err := c.endDeparted(dp); err != nil || n != 0 || len(dp.ended) != 0 {
		t.Fatalf("nothing departed: ended %v (%d, %v); want no walk", dp.ended, n, err)
	}

	s1.Active = []datapath.Backend{y} // X leaves s1; s2 keeps it
	if err := m.Apply("a/s1", []service.Frontend{s1}); err != nil {
		t.Fatal(err)
	}
	want := map[datapath.ServiceBackend]bool{{Service: dp.services[s1.Key].ID, Backend: dp.services[s2.Key].Backends[0]}: true}
	dp.endErr = errors.New("map walk interrupted")
	if _, err := c.endDeparted(dp); err == nil {
		t.Error("an error of EndServiceFlows was not returned")
	}
	dp.endErr = nil
	if n, err := c.endDeparted(dp); err != nil || n != 2 {
		t.Errorf("endDeparted = %d, %v; want the 2 entries of the pair", n, err)
	}
	if len(dp.ended) != 2 || !maps.Equal(dp.ended[0], want) || !maps.Equal(dp.ended[1], want) {
		t.Errorf("asked to end %v, want %v twice (again after the failed round)", dp.ended, want)
	}
	if n, err := c.endDeparted(dp); err != nil || n != 0 || len(dp.ended) != 2 {
		t.Errorf("after the flows were ended: asked again (%v, %d, %v); want the pair forgotten", dp.ended, n, err)
	}
	if got := m.Departed(); len(got) != 0 {
		t.Errorf("still departed: %v", got)
	}
}

// The UDP socket closer queues the sockets of a departure from a UDP frontend only
// (TCP connections are left, as when a backend is deleted), through that frontend.
func TestUDPCloserDeparted(t *testing.T) {
	u := &udpCloser{queue: make(chan datapath.UDPSocketTarget, 4), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	x := datapath.Backend{Addr: netip.MustParseAddr("10.244.1.5"), Port: 53}
	udp := datapath.Frontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 53, Proto: unix.IPPROTO_UDP}
	tcp := udp
	tcp.Proto = unix.IPPROTO_TCP
	u.departed(service.Departure{Frontend: tcp, Backend: x})
	u.departed(service.Departure{Frontend: udp, Backend: x})
	var got []string
	for len(u.queue) > 0 {
		got = append(got, (<-u.queue).String())
	}
	if want := []string{"10.244.1.5:53 from 10.96.0.10:53/udp"}; !slices.Equal(got, want) {
		t.Errorf("queued %v, want %v", got, want)
	}
}

// The closer takes every target queued behind the first into one pass, each once:
// a burst of removed backends (or one flapping) costs one run per namespace.
func TestUDPCloserBatch(t *testing.T) {
	u := &udpCloser{queue: make(chan datapath.UDPSocketTarget, 8), log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	b := func(last byte) datapath.UDPSocketTarget {
		return datapath.UDPSocketTarget{Backend: datapath.Backend{Addr: netip.AddrFrom4([4]byte{10, 244, 1, last}), Port: 53}}
	}
	udp := datapath.Frontend{Addr: netip.MustParseAddr("10.96.0.10"), Port: 53, Proto: unix.IPPROTO_UDP}
	via := b(5)
	via.Via = &udp
	for _, t := range []datapath.UDPSocketTarget{b(6), b(5), via, b(6), b(7)} {
		u.enqueue(t)
	}
	var got []string
	for _, t := range u.batch(b(5)) {
		got = append(got, t.String())
	}
	want := []string{"10.244.1.5:53", "10.244.1.6:53", "10.244.1.5:53 from 10.96.0.10:53/udp", "10.244.1.7:53"}
	if !slices.Equal(got, want) {
		t.Errorf("batch %v, want %v", got, want)
	}
	if len(u.queue) != 0 {
		t.Errorf("%d targets left queued, want none", len(u.queue))
	}
}
