package ipam

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// TestAllocatorRandomSequences runs random allocate/release sequences (retried
// allocations included) over a small range and checks after every step that no
// address is handed out twice, every owner keeps the address it got, and
// allocated + free == size.
func TestAllocatorRandomSequences(t *testing.T) {
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 1))
		a, err := NewAllocator(netip.MustParsePrefix("10.9.0.0/28"))
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]netip.Addr{} // what each owner was handed
		for step := range 300 {
			owner := fmt.Sprintf("c%d", rng.IntN(20))
			if rng.IntN(3) == 0 {
				ip, ok := a.Release(owner)
				if want, had := held[owner]; ok != had || ok && ip != want {
					t.Fatalf("seed %d step %d: Release(%s) = %v %v, want %v %v", seed, step, owner, ip, ok, want, had)
				}
				delete(held, owner)
			} else {
				ip, err := a.Allocate(owner, nil)
				switch want, had := held[owner]; {
				case had && (err != nil || ip != want):
					t.Fatalf("seed %d step %d: retried Allocate(%s) = %v %v, want its %v", seed, step, owner, ip, err, want)
				case !had && len(held) == a.Total():
					if !errors.Is(err, ErrExhausted) {
						t.Fatalf("seed %d step %d: Allocate on a full range = %v %v, want ErrExhausted", seed, step, ip, err)
					}
				case err != nil:
					t.Fatalf("seed %d step %d: Allocate(%s) with %d of %d used: %v", seed, step, owner, len(held), a.Total(), err)
				default:
					held[owner] = ip
				}
			}
			checkConserved(t, a, held)
		}
	}
}

// checkConserved: the allocator's state is exactly held, held's addresses are
// distinct and allocatable, and used + free == size.
func checkConserved(t *testing.T, a *Allocator, held map[string]netip.Addr) {
	t.Helper()
	seen := map[netip.Addr]string{}
	for owner, ip := range held {
		if prev, dup := seen[ip]; dup {
			t.Fatalf("%v handed to both %s and %s", ip, prev, owner)
		}
		seen[ip] = owner
		if ip.Compare(first(a.cidr)) < 0 || ip.Compare(a.last()) > 0 {
			t.Fatalf("%v of %s is outside the allocatable range", ip, owner)
		}
	}
	if !a.allocatable(a.Next()) {
		t.Fatalf("the scan starts at %v, outside the allocatable range", a.Next())
	}
	got := a.Owners()
	if len(got) != len(held) || a.Used() != len(held) || len(a.owners) != len(held) {
		t.Fatalf("allocator holds %v (%d used, %d addresses), want %v", got, a.Used(), len(a.owners), held)
	}
	for owner, ip := range held {
		if got[owner] != ip || a.owners[ip] != owner {
			t.Fatalf("%s: allocator says %v, was handed %v", owner, got[owner], ip)
		}
	}
	free := 0
	for ip := first(a.cidr); ip.Compare(a.last()) <= 0; ip = ip.Next() {
		if _, used := a.owners[ip]; !used {
			free++
		}
	}
	if a.Used()+free != a.Total() {
		t.Fatalf("used %d + free %d != size %d", a.Used(), free, a.Total())
	}
}

// A second Restore of an owner under another address would leave the first
// address held by no one that can release it.
func TestAllocatorRestoreRefusesASecondAddress(t *testing.T) {
	a, _ := NewAllocator(netip.MustParsePrefix("10.9.0.0/28"))
	if err := a.Restore(netip.MustParseAddr("10.9.0.3"), "c"); err != nil {
		t.Fatal(err)
	}
	if err := a.Restore(netip.MustParseAddr("10.9.0.4"), "c"); err == nil {
		t.Fatal("restoring a second address for the same owner succeeded")
	}
	a.Release("c")
	if a.Used() != 0 {
		t.Fatalf("after releasing c %d addresses are still in use: %v", a.Used(), a.owners)
	}
}

// TestPoolConcurrentAllocateRelease: many containers allocating, retrying and
// releasing at once never share an address, and the pool ends empty.
func TestPoolConcurrentAllocateRelease(t *testing.T) {
	p, err := OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.9.0.0/26"))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	live := map[netip.Addr]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for w := range 40 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("ctr-%d", w)
			for range 5 {
				ip, err := p.Allocate(owner, nil)
				again, err2 := p.Allocate(owner, nil) // the runtime retries ADD
				if err != nil || err2 != nil || again != ip {
					errs <- fmt.Errorf("%s: allocate %v %v, retry %v %v", owner, ip, err, again, err2)
					return
				}
				mu.Lock()
				if other, dup := live[ip]; dup {
					mu.Unlock()
					errs <- fmt.Errorf("%v handed to %s while %s holds it", ip, owner, other)
					return
				}
				live[ip] = owner
				mu.Unlock()
				mu.Lock()
				delete(live, ip)
				mu.Unlock()
				if err := p.Release(owner); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if _, used, _ := p.Usage(); used != 0 {
		t.Errorf("%d addresses still allocated after every owner released", used)
	}
}

// A failed write of a retried allocation must not take the owner's address away:
// its endpoint still has it, and the next allocation would hand it to another pod.
func TestPoolFailedSaveKeepsAnExistingAllocation(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPool(filepath.Join(dir, "ipam.json"), netip.MustParsePrefix("10.9.0.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	ip, err := p.Allocate("live", nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil { // every save fails from now on
		t.Fatal(err)
	}
	if _, err := p.Allocate("live", nil); err == nil {
		t.Log("the retried allocation needed no write")
	}
	if got, ok := p.Lookup("live"); !ok || got != ip {
		t.Fatalf("after a failed retried allocation live holds %v %v, want %v", got, ok, ip)
	}
	if _, err := p.Allocate("new", nil); err == nil {
		t.Fatal("an allocation whose save failed succeeded")
	}
	if _, ok := p.Lookup("new"); ok {
		t.Error("an allocation whose save failed is kept")
	}
}

// A corrupt pool file does not stop the agent: it is moved aside, the pool starts
// empty and says why; a file whose entries are partly bad keeps the good ones and
// leaves out every claimant of a doubled address.
func TestOpenPoolRecoversADamagedFile(t *testing.T) {
	cidr := netip.MustParsePrefix("10.9.0.0/28")
	path := filepath.Join(t.TempDir(), "ipam.json")
	if err := os.WriteFile(path, []byte(`{"cidr":"10.9.0.0/28","allocations":{"a":"10.9`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := OpenPool(path, cidr)
	if err != nil {
		t.Fatalf("OpenPool of a truncated file: %v", err)
	}
	if d := p.Damaged(); d == nil || !strings.Contains(d.Error(), "ipam.json.corrupt") {
		t.Errorf("Damaged() = %v, want it to name the file moved aside", d)
	}
	if b, err := os.ReadFile(path + ".corrupt"); err != nil || !strings.Contains(string(b), `"a":"10.9`) {
		t.Errorf("the corrupt file moved aside: %q %v", b, err)
	}
	if _, used, _ := p.Usage(); used != 0 {
		t.Errorf("%d allocations from a corrupt file", used)
	}

	if err := os.WriteFile(path, []byte(`{"cidr":"10.9.0.0/28","allocations":{"good":"10.9.0.3","x":"10.9.0.5","y":"10.9.0.5",
		"bad":"nonsense","far":"10.1.0.9"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err = OpenPool(path, cidr)
	if err != nil {
		t.Fatalf("OpenPool of a file with bad entries: %v", err)
	}
	if got := p.Owners(); len(got) != 1 || got["good"] != netip.MustParseAddr("10.9.0.3") {
		t.Errorf("allocations kept: %v, want only good", got)
	}
	for _, want := range []string{"10.9.0.5", "nonsense", "10.1.0.9"} {
		if d := p.Damaged(); d == nil || !strings.Contains(d.Error(), want) {
			t.Errorf("Damaged() = %v, want it to name %s", d, want)
		}
	}
	if p2, err := OpenPool(path, cidr); err != nil || p2.Damaged() != nil || len(p2.Owners()) != 1 {
		t.Errorf("reopened after the repair: %v %v %v, want whole with good", err, p2.Damaged(), p2.Owners())
	}
}

// TestAllocatorPassesOverClaimedAddresses runs random allocate/release sequences while
// addresses are claimed and unclaimed (Pods being deleted that still list them) and
// checks after every step: a new allocation is never a claimed address; it succeeds
// exactly when an address is free and unclaimed (so one whose claim went away is
// handed out again); an owner keeps its address even once it is claimed; and a range
// whose free addresses are all claimed says so (ErrClaimed, naming the range).
func TestAllocatorPassesOverClaimedAddresses(t *testing.T) {
	cidr := netip.MustParsePrefix("10.9.0.0/28")
	for seed := range uint64(200) {
		rng := rand.New(rand.NewPCG(seed, 2))
		a, err := NewAllocator(cidr)
		if err != nil {
			t.Fatal(err)
		}
		held := map[string]netip.Addr{}
		claims := map[netip.Addr]bool{}
		claimed := func(ip netip.Addr) bool { return claims[ip] }
		for step := range 400 {
			owner := fmt.Sprintf("c%d", rng.IntN(20))
			switch rng.IntN(4) {
			case 0:
				a.Release(owner)
				delete(held, owner)
			case 1: // a Pod starts or stops listing a random address of the range
				ip := first(cidr)
				for range rng.IntN(a.Total()) {
					ip = ip.Next()
				}
				claims[ip] = !claims[ip]
			default:
				free, freeClaimed := freeAddresses(a, claims)
				ip, err := a.Allocate(owner, claimed)
				switch want, had := held[owner]; {
				case had:
					if err != nil || ip != want {
						t.Fatalf("seed %d step %d: retried Allocate(%s) = %v %v, want its %v (claimed: %v)", seed, step, owner, ip, err, want, claims[want])
					}
				case free == freeClaimed:
					if !errors.Is(err, ErrExhausted) || errors.Is(err, ErrClaimed) != (freeClaimed > 0) {
						t.Fatalf("seed %d step %d: Allocate with %d free, all claimed = %v %v, want ErrExhausted (ErrClaimed: %v)",
							seed, step, free, ip, err, freeClaimed > 0)
					}
					if freeClaimed > 0 && (!strings.Contains(err.Error(), cidr.String()) || !strings.Contains(err.Error(), "being deleted")) {
						t.Fatalf("seed %d step %d: error %q does not name the range and the Pods being deleted", seed, step, err)
					}
				case err != nil:
					t.Fatalf("seed %d step %d: Allocate(%s) with %d free addresses, %d claimed: %v", seed, step, owner, free, freeClaimed, err)
				case claims[ip]:
					t.Fatalf("seed %d step %d: Allocate(%s) handed out the claimed %v", seed, step, owner, ip)
				default:
					held[owner] = ip
				}
			}
			checkConserved(t, a, held)
		}
	}
}

// freeAddresses counts the addresses a holds for no one, and those of them claims has.
func freeAddresses(a *Allocator, claims map[netip.Addr]bool) (free, claimed int) {
	for ip := first(a.cidr); ip.Compare(a.last()) <= 0; ip = ip.Next() {
		if _, used := a.owners[ip]; !used {
			free++
			if claims[ip] {
				claimed++
			}
		}
	}
	return free, claimed
}
