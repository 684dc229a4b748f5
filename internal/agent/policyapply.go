package agent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/policy"
)

// policyMaps are the datapath's NetworkPolicy maps (datapath.Datapath, or a
// fake in tests).
type policyMaps interface {
	SetPolicy(datapath.PolicyKey, []datapath.PolicyPort) error
	DeletePolicy(datapath.PolicyKey) error
	Policies() (map[datapath.PolicyKey][]datapath.PolicyPort, error)
	SetPolicyFlags(netip.Addr, datapath.PolicyFlags) error
	PolicyFlagsAll() (map[netip.Addr]datapath.PolicyFlags, error)
	SetIPCache(netip.Prefix, uint32) error
	DeleteIPCache(netip.Prefix) error
	IPCache() (map[netip.Prefix]uint32, error)
	PurgePolicyCT(datapath.PolicyCTPurge) (int, error)
}

// policyApplied is what one apply wrote and what it could not.
type policyApplied struct {
	writes int
	// purged is how many tracked connections were forgotten.
	purged int
	// failed are the local pods whose entries could not all be written
	// (they fail closed: their direction is marked incomplete).
	failed map[netip.Addr][]string
	// flagsDone says the apply reached its flags step (it stops before writing
	// anything when it can't read the maps); unflagged are the local pods
	// whose isolation flags could not be written there. Either way those pods
	// are not enforcing what st says (admission waits for a later apply).
	flagsDone bool
	unflagged map[netip.Addr]bool
}

// applyPolicy makes the maps hold st, in the order that never denies what
// both the old and the new state allow (docs/policy.md): entries, then the
// ipcache, then flags, then removals, then the tracked connections the change
// may no longer allow are forgotten (with those an earlier apply left in the
// journal j, which holds them from before the first write until they are
// forgotten). A pod becoming isolated first loses stale entries (of a pod that
// had its address before). An entry or prefix that can't be written makes its
// pod's direction incomplete (fail closed); the other writes go on. orphans
// (address → namespace/name) are this node's endpoints that st has no pod for:
// what the maps hold for them is kept (keepOrphans). before (nil: nothing) is
// called with the flags the maps hold ahead of every write: the agent tracks
// there the open connections of pods st isolates for the first time
// (policySeeder.before).
func applyPolicy(m policyMaps, j *purgeJournal, st policy.State, orphans map[netip.Addr]string,
	before func(cur map[netip.Addr]datapath.PolicyFlags)) (policyApplied, error) {
	res := policyApplied{failed: map[netip.Addr][]string{}, unflagged: map[netip.Addr]bool{}}
	curFlags, err := m.PolicyFlagsAll()
	if err != nil {
		return res, err
	}
	curEntries, err := m.Policies()
	if err != nil {
		return res, err
	}
	curCache, err := m.IPCache()
	if err != nil {
		return res, err
	}
	keepOrphans(st, orphans, curFlags, curEntries)
	if before != nil {
		before(curFlags)
	}
	want := desiredEntries(st)
	purge := policyCTPurge(st, want, curEntries, curFlags, curCache)
	pending, journalErr := j.pending()
	errs := []error{journalErr}
	if purge = mergePurges(purge, pending); !purge.Empty() {
		// A journal that can't be written still lets the policy change: it only
		// matters if the agent also dies before step 5.
		errs = append(errs, j.record(purge))
	}
	fail := func(ip netip.Addr, egress bool, err error) {
		res.failed[ip] = append(res.failed[ip], err.Error())
		ep := st.Endpoints[ip]
		if ep != nil {
			ep.Flags |= incomplete(egress)
			ep.Problems = append(ep.Problems, err.Error())
		}
	}
	// 1. Stale entries of pods becoming isolated, then entries to add or change.
	written := setPolicyEntries(m, want, curEntries, curFlags, fail, &res)
	// 2. The ipcache: policy CIDRs before pod /32s (shortest prefixes first).
	cacheErrs := setIPCache(m, st.IPCache, curCache, &res)
	// 3. Flags.
	flagErrs := setPolicyFlags(m, st, curFlags, &res)
	res.flagsDone = true
	// 4. Removals.
	written = append(written, removeStale(m, st.IPCache, want, curEntries, curCache, &res)...)
	// 4b. A write step 2 could not make (a full ipcache: the old policy CIDRs
	// and the new ones held together for a moment) is tried again now that the
	// old are gone; meanwhile its addresses were world (denied).
	written = append(written, retryIPCache(m, st.IPCache, cacheErrs, &res)...)
	errs = append(append(errs, written...), flagErrs...)
	// 5. Tracked connections the change may no longer allow; those st still
	// allows keep passing where the maps hold st: not after a write that may
	// have left any pod's peers or flags other than st says (nor after an
	// unreadable journal: its purgeAll stands for /32 changes, never judged).
	held := journalErr == nil && errors.Join(written...) == nil && len(flagErrs) == len(res.unflagged)
	purge.Allowed = purgeJudge(st, want, &res, held)
	return res, errors.Join(append(errs, forgetTracked(m, j, purge, &res))...)
}

// forgetTracked is step 5 of applyPolicy: the purge, then the journal is done
// with it. A purge that fails stays in the journal: the next apply tries again.
func forgetTracked(m policyMaps, j *purgeJournal, purge datapath.PolicyCTPurge, res *policyApplied) error {
	n, err := m.PurgePolicyCT(purge)
	res.purged = n
	if err != nil {
		return err
	}
	return j.done()
}

// setPolicyEntries is step 1 of applyPolicy: it deletes the stale entries of pods
// that are not isolated yet (from curEntries too), then writes every wanted entry
// that differs; a failed write goes to fail.
func setPolicyEntries(m policyMaps, want, curEntries map[datapath.PolicyKey][]datapath.PolicyPort,
	curFlags map[netip.Addr]datapath.PolicyFlags, fail func(netip.Addr, bool, error), res *policyApplied) []error {
	var errs []error
	for k := range curEntries {
		if _, keep := want[k]; !keep && curFlags[k.Endpoint] == 0 {
			if err := m.DeletePolicy(k); err != nil {
				errs = append(errs, err)
			}
			delete(curEntries, k)
			res.writes++
		}
	}
	for _, k := range sortedPolicyKeys(want) {
		if cur, ok := curEntries[k]; ok && slices.Equal(cur, want[k]) {
			continue
		}
		res.writes++
		if err := m.SetPolicy(k, want[k]); err != nil {
			fail(k.Endpoint, k.Egress, err)
		}
	}
	return errs
}

// removeStale is step 4 of applyPolicy: prefixes and entries the state no longer has.
func removeStale(m policyMaps, cache map[netip.Prefix]uint32, want, curEntries map[datapath.PolicyKey][]datapath.PolicyPort,
	curCache map[netip.Prefix]uint32, res *policyApplied) []error {
	var errs []error
	for p := range curCache {
		if _, ok := cache[p]; !ok {
			res.writes++
			if err := m.DeleteIPCache(p); err != nil {
				errs = append(errs, err)
			}
		}
	}
	for k := range curEntries {
		if _, ok := want[k]; !ok {
			res.writes++
			if err := m.DeletePolicy(k); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// policyCTPurge names the tracked connections that the change from the
// current maps to st may no longer allow (docs/policy.md): those of local
// pods that lose or change an entry or change flags, and those of peers
// whose identity may change (any ipcache prefix added, removed or changed
// that covers them). Pure additions of entries only allow more: no purge.
// A /32 removed from the ipcache is a pod gone: it pays for no entry any more.
func policyCTPurge(st policy.State, want, curEntries map[datapath.PolicyKey][]datapath.PolicyPort,
	curFlags map[netip.Addr]datapath.PolicyFlags, curCache map[netip.Prefix]uint32) datapath.PolicyCTPurge {
	p := datapath.PolicyCTPurge{Endpoints: map[netip.Addr]bool{}, Peers: map[netip.Addr]bool{}, Gone: map[netip.Addr]bool{}}
	for k, cur := range curEntries {
		if w, ok := want[k]; !ok || !slices.Equal(cur, w) {
			p.Endpoints[k.Endpoint] = true
		}
	}
	for ip, f := range curFlags {
		if ep := st.Endpoints[ip]; ep == nil || ep.Flags != f {
			p.Endpoints[ip] = true
		}
	}
	for ip, ep := range st.Endpoints {
		if curFlags[ip] != ep.Flags {
			p.Endpoints[ip] = true
		}
	}
	changed := func(pfx netip.Prefix) {
		if pfx.Bits() == 32 {
			p.Peers[pfx.Addr()] = true
		} else {
			p.Prefixes = append(p.Prefixes, pfx)
		}
	}
	for pfx, id := range curCache {
		w, ok := st.IPCache[pfx]
		if !ok || w != id {
			changed(pfx)
		}
		if !ok && pfx.Bits() == 32 {
			p.Gone[pfx.Addr()] = true
		}
	}
	for pfx := range st.IPCache {
		if _, ok := curCache[pfx]; !ok {
			changed(pfx)
		}
	}
	return p
}

// setPolicyFlags writes the flags of st's endpoints and clears those of
// addresses no longer isolated.
func setPolicyFlags(m policyMaps, st policy.State, cur map[netip.Addr]datapath.PolicyFlags, res *policyApplied) []error {
	var errs []error
	for ip, ep := range st.Endpoints {
		if cur[ip] == ep.Flags {
			continue
		}
		res.writes++
		if err := m.SetPolicyFlags(ip, ep.Flags); err != nil {
			errs = append(errs, err)
			res.unflagged[ip] = true
		}
	}
	for ip := range cur {
		if _, ok := st.Endpoints[ip]; !ok {
			res.writes++
			if err := m.SetPolicyFlags(ip, 0); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errs
}

// setIPCache writes the prefixes of want that cur lacks or holds with another
// identity, shortest first (an ipBlock before its except). Only those are sorted: a
// pod change among 50,000 pods writes one prefix, and sorting all of them (then
// looking each up in both maps) was half of this function's 12% of the agent's CPU
// under churn (docs/bench/2026-11-30/kwok-full, run 6's profile).
func setIPCache(m policyMaps, want, cur map[netip.Prefix]uint32, res *policyApplied) []error {
	var changed []netip.Prefix
	for p, id := range want {
		if old, ok := cur[p]; !ok || old != id {
			changed = append(changed, p)
		}
	}
	slices.SortFunc(changed, func(a, b netip.Prefix) int {
		if a.Bits() != b.Bits() {
			return a.Bits() - b.Bits()
		}
		return a.Addr().Compare(b.Addr())
	})
	var (
		errs   []error
		failed []netip.Prefix
	)
	for _, p := range changed {
		res.writes++
		if err := m.SetIPCache(p, want[p]); err != nil {
			// A pod without its /32 matches no label selector: denied, never allowed by mistake.
			errs = append(errs, fmt.Errorf("ipcache %s: %w", p, err))
			failed = append(failed, p)
		}
	}
	return append(errs, dropCoveringPrefixes(m, failed, want, cur, res)...)
}

// retryIPCache is step 4b of applyPolicy: when step 2 failed (errs), setIPCache
// again against what the map holds after the removals (a failed write made the
// mirror read the map); nothing when step 2 did not fail.
func retryIPCache(m policyMaps, want map[netip.Prefix]uint32, errs []error, res *policyApplied) []error {
	if len(errs) == 0 {
		return nil
	}
	cur, err := m.IPCache()
	if err != nil {
		return []error{err}
	}
	return setIPCache(m, want, cur, res)
}

// dropCoveringPrefixes fails closed when prefixes could not be written: a
// wider prefix holding one (an ipBlock holding its except) would give the
// missing prefix's addresses its identity, allowing what the except denies.
// Every wider prefix holding a failed one is removed: those addresses are
// world (denied) until the next apply writes them all.
func dropCoveringPrefixes(m policyMaps, failed []netip.Prefix, want, cur map[netip.Prefix]uint32, res *policyApplied) []error {
	if len(failed) == 0 {
		return nil
	}
	var errs []error
	covers := func(p netip.Prefix) bool {
		for _, f := range failed {
			if p.Bits() < f.Bits() && p.Contains(f.Addr()) {
				return true
			}
		}
		return false
	}
	seen := map[netip.Prefix]bool{}
	for _, set := range []map[netip.Prefix]uint32{want, cur} {
		for p := range set {
			if seen[p] || !covers(p) {
				continue
			}
			seen[p] = true
			res.writes++
			if err := m.DeleteIPCache(p); err != nil {
				errs = append(errs, err)
			}
			errs = append(errs, fmt.Errorf("ipcache %s: removed: it holds a prefix that could not be written", p))
		}
	}
	return errs
}

func incomplete(egress bool) datapath.PolicyFlags {
	if egress {
		return datapath.PolicyEgressIncomplete
	}
	return datapath.PolicyIngressIncomplete
}

// orphanProblem is what `myelin endpoints` says of an endpoint keepOrphans kept.
const orphanProblem = "its Pod is gone from the API while its sandbox is still on this node: " +
	"the policy it had last is kept until CNI DEL removes the endpoint"

// keepOrphans adds to st the isolated endpoints among orphans as the maps hold
// them (flags and entries): a pod force-deleted from the API (kubectl delete
// --force) runs on until the kubelet kills it, and for as long as the kubelet
// is down or cut off; without its Pod the computation does not see it, and
// writing st as computed would lift its isolation both ways. So would an agent
// that restarted after the deletion. Peers that appear later are not added to
// its entries (fail closed); CNI DEL ends it.
func keepOrphans(st policy.State, orphans map[netip.Addr]string, curFlags map[netip.Addr]datapath.PolicyFlags,
	curEntries map[datapath.PolicyKey][]datapath.PolicyPort) {
	var kept map[netip.Addr]*policy.Endpoint
	for ip, ref := range orphans {
		if _, ok := st.Endpoints[ip]; ok || curFlags[ip] == 0 {
			continue
		}
		if kept == nil {
			kept = map[netip.Addr]*policy.Endpoint{}
		}
		kept[ip] = &policy.Endpoint{Pod: ref, IP: ip, Flags: curFlags[ip], Entries: map[policy.Key][]datapath.PolicyPort{},
			Problems: []string{orphanProblem}}
		st.Endpoints[ip] = kept[ip]
	}
	if kept == nil {
		return
	}
	for k, ports := range curEntries {
		if ep := kept[k.Endpoint]; ep != nil {
			ep.Entries[policy.Key{Identity: k.Identity, Egress: k.Egress}] = ports
		}
	}
}

// desiredEntries flattens st's entries into map keys.
func desiredEntries(st policy.State) map[datapath.PolicyKey][]datapath.PolicyPort {
	out := map[datapath.PolicyKey][]datapath.PolicyPort{}
	for ip, ep := range st.Endpoints {
		for k, ports := range ep.Entries {
			out[datapath.PolicyKey{Endpoint: ip, Identity: k.Identity, Egress: k.Egress}] = ports
		}
	}
	return out
}

func sortedPolicyKeys(m map[datapath.PolicyKey][]datapath.PolicyPort) []datapath.PolicyKey {
	keys := make([]datapath.PolicyKey, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b datapath.PolicyKey) int {
		if c := a.Endpoint.Compare(b.Endpoint); c != 0 {
			return c
		}
		if a.Identity != b.Identity {
			return int(a.Identity) - int(b.Identity)
		}
		if a.Egress == b.Egress {
			return 0
		}
		if a.Egress {
			return 1
		}
		return -1
	})
	return keys
}
