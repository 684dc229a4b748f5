package endpoint

import (
	"fmt"
	"sync"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// TestManagerTwoADDsOfOneContainer: the runtime retries an ADD while the first is
// still in flight. Both get the same IP; one builds the veth, the other finds its
// name taken and fails. The loser's cleanup must not free the IP the winner is
// about to register, whichever of the two allocated first.
func TestManagerTwoADDsOfOneContainer(t *testing.T) {
	for winner := range 2 {
		t.Run(fmt.Sprintf("ADD %d builds the veth", winner+1), func(t *testing.T) {
			n := newNode(t)
			ref := api.PodRef{ContainerID: "ctr", Namespace: "default", Pod: "ctr"}
			var allocs [2]api.Allocation
			for i := range allocs {
				a, err := n.m.Allocate(ref)
				if err != nil {
					t.Fatal(err)
				}
				allocs[i] = a
			}
			win, lose := allocs[winner], allocs[1-winner]
			if win.IP != lose.IP {
				t.Fatalf("the two ADDs of one container got %s and %s", win.IP, lose.IP)
			}
			idx, err := n.links.createVeth(win.HostIfName)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := n.links.createVeth(lose.HostIfName); err == nil {
				t.Fatal("the second veth of one name was created")
			}
			if err := n.m.Release(ref.ContainerID, lose.Attempt); err != nil { // the loser's cleanup
				t.Fatal(err)
			}
			ep, err := n.m.Put(api.Endpoint{PodRef: ref, IP: win.IP, HostIfName: win.HostIfName, HostIfIndex: idx,
				HostMAC: "02:00:00:00:00:01", PodMAC: "02:00:00:00:00:02"})
			if err != nil {
				t.Fatalf("the winning ADD's register after the loser's cleanup: %v", err)
			}
			if ip, ok := n.m.pool.Lookup(ref.ContainerID); !ok || ip.String() != ep.IP {
				t.Errorf("after both ADDs the container holds %v %v, want %s", ip, ok, ep.IP)
			}
			n.consistent(t)
		})
	}
}

// Two ADDs of one container that both fail free its IP once both have released,
// whichever releases first.
func TestManagerTwoFailedADDsOfOneContainerFreeTheIP(t *testing.T) {
	n := newNode(t)
	ref := api.PodRef{ContainerID: "ctr"}
	a, errA := n.m.Allocate(ref)
	b, errB := n.m.Allocate(ref)
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if err := n.m.Release(ref.ContainerID, b.Attempt); err != nil {
		t.Fatal(err)
	}
	if _, ok := n.m.pool.Lookup(ref.ContainerID); !ok {
		t.Fatal("the first failed ADD's release freed the IP the other ADD in flight holds")
	}
	n.consistent(t)
	if err := n.m.Release(ref.ContainerID, a.Attempt); err != nil {
		t.Fatal(err)
	}
	if ip, ok := n.m.pool.Lookup(ref.ContainerID); ok || len(n.m.pending) != 0 {
		t.Errorf("after both ADDs released: IP %v %v, pending %v; want nothing", ip, ok, n.m.pending)
	}
}

// The release of an ADD that a DEL overtook (the runtime gave up on it and deleted
// the container) leaves the allocation of a later ADD of the same container id; a
// release without an attempt (a plugin from before attempts) frees it as before.
func TestManagerStaleReleaseLeavesALaterADD(t *testing.T) {
	n := newNode(t)
	ref := api.PodRef{ContainerID: "ctr"}
	old, err := n.m.Allocate(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.del(ref.ContainerID); err != nil {
		t.Fatal(err)
	}
	later, err := n.m.Allocate(ref)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.m.Release(ref.ContainerID, old.Attempt); err != nil {
		t.Fatal(err)
	}
	if ip, ok := n.m.pool.Lookup(ref.ContainerID); !ok || ip.String() != later.IP {
		t.Fatalf("the later ADD's IP after the overtaken ADD's release: %v %v, want %s", ip, ok, later.IP)
	}
	if err := n.m.Release(ref.ContainerID, ""); err != nil {
		t.Fatal(err)
	}
	if ip, ok := n.m.pool.Lookup(ref.ContainerID); ok {
		t.Errorf("a release without an attempt left %v allocated", ip)
	}
}

// TestManagerConcurrentADDsOfOneContainer: two ADDs of each container at once, as a
// runtime that retries an ADD still in flight sends them, held by hooks where the
// race hurts: both have allocated before either builds the veth, and the one that
// built it registers only once the other (which found the veth taken) has answered
// and cleaned up. Exactly one of each pair registers, and the container keeps its IP.
func TestManagerConcurrentADDsOfOneContainer(t *testing.T) {
	n := newNode(t)
	var wg sync.WaitGroup
	results := make([][2]error, 8)
	for c := range results {
		id := fmt.Sprintf("ctr-%d", c)
		var allocated sync.WaitGroup
		allocated.Add(2)
		done := [2]chan struct{}{make(chan struct{}), make(chan struct{})}
		for i := range 2 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer close(done[i])
				_, results[c][i] = n.addWith(id, addHooks{
					afterAllocate: func() { allocated.Done(); allocated.Wait() },
					beforePut:     func() { <-done[1-i] }, // only the ADD that built the veth gets here
				})
			}()
		}
	}
	wg.Wait()
	for c, r := range results {
		id := fmt.Sprintf("ctr-%d", c)
		if (r[0] == nil) == (r[1] == nil) {
			t.Errorf("%s: ADDs returned %v and %v, want exactly one to succeed", id, r[0], r[1])
		}
		if _, ok := n.m.Get(id); !ok {
			t.Errorf("%s: no endpoint after its two ADDs", id)
		}
	}
	n.consistent(t)
	if len(n.m.pending) != 0 {
		t.Errorf("ADDs still pending after every ADD answered: %v", n.m.pending)
	}
}
