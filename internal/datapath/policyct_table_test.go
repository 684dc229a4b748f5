package datapath

import (
	"errors"
	"fmt"
	"testing"
)

// mappedPolicyCT maps d's myelin_policy_ct until test t ends.
func mappedPolicyCT(t *testing.T, d *Datapath) *policyCTTable {
	t.Helper()
	ct, err := mapPolicyCT(d.objs.MyelinPolicyCt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ct.close() })
	return ct
}

// policyCTGet is connection k's entry in myelin_policy_ct, as the programs
// find it.
func policyCTGet(d *Datapath, k myelinPolicyCtKey) (v myelinPolicyCtEntry, ok bool) {
	d.withPolicyCT(func(t *policyCTTable) error {
		_, v, _, ok = t.find(d.policyCTSeed, k)
		return nil
	})
	return v, ok
}

// policyCTPut writes connection k's entry v as the programs would (its own
// slot, else an empty one of its bucket); an error when the bucket is full.
func policyCTPut(d *Datapath, k myelinPolicyCtKey, v myelinPolicyCtEntry) error {
	return d.withPolicyCT(func(t *policyCTTable) error {
		pick := -1
		for _, i := range t.slotsOf(d.policyCTSeed, k) {
			sk, _, _, busy := t.read(i)
			if !busy && (sk == k || (sk.Proto == 0 && pick < 0)) {
				pick = i
			}
		}
		if pick < 0 {
			return fmt.Errorf("policy table: bucket of %+v full", k)
		}
		_, _, seq, _ := t.read(pick)
		born := policyCTUnits(MonotonicNow())
		if !t.write(pick, seq, func(s *myelinPolicyCtSlot) { s.Key, s.Entry, s.Born, s.Ref = k, v, born, 0 }) {
			return fmt.Errorf("policy table: slot %d written meanwhile", pick)
		}
		return nil
	})
}

// policyCTDelete empties connection k's slot; false when it is not tracked.
func policyCTDelete(d *Datapath, k myelinPolicyCtKey) (deleted bool) {
	d.withPolicyCT(func(t *policyCTTable) error {
		i, _, seq, ok := t.find(d.policyCTSeed, k)
		deleted = ok && t.empty(i, seq)
		return nil
	})
	return deleted
}

// policyCTEntries are the tracked connections.
func policyCTEntries(d *Datapath) map[myelinPolicyCtKey]myelinPolicyCtEntry {
	out := map[myelinPolicyCtKey]myelinPolicyCtEntry{}
	d.withPolicyCT(func(t *policyCTTable) error {
		t.each(func(_ int, k myelinPolicyCtKey, v myelinPolicyCtEntry, _ uint32) { out[k] = v })
		return nil
	})
	return out
}

// clearPolicyCT empties every slot (as seedPolicy starts, or as an eviction
// would) and returns how many connections there were.
func clearPolicyCT(d *Datapath) (n int, err error) {
	mapErr := d.withPolicyCT(func(t *policyCTTable) error {
		t.each(func(i int, k myelinPolicyCtKey, _ myelinPolicyCtEntry, seq uint32) {
			if !t.empty(i, seq) && err == nil {
				err = fmt.Errorf("policy table: slot %d of %+v written meanwhile", i, k)
			}
			n++
		})
		return nil
	})
	return n, errors.Join(mapErr, err)
}

// policy-ct-max is rounded up to whole buckets: the table never holds fewer
// connections than the operator asked for.
func TestPolicyCTBucketsHoldAtLeastMax(t *testing.T) {
	for _, c := range []struct{ max, buckets uint32 }{{1024, 256}, {1025, 257}, {1027, 257}, {1028, 257}, {131072, 32768}, {1 << 22, 1 << 20}} {
		if got := policyCTBuckets(c.max); got != c.buckets || got*policyCTWays < c.max {
			t.Errorf("policyCTBuckets(%d) = %d, want %d (%d slots at least)", c.max, got, c.buckets, c.max)
		}
	}
}
