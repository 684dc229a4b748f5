// Package maglev is Maglev consistent hashing (Eisenbud et al., NSDI 2016): the lookup
// table every node computes identically from a Service's backends, and the primality the
// table size needs. Pure; the datapath holds the tables, internal/service builds them.
package maglev

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"
)

// maglevSeed is mixed into every backend's hash. It is a constant, not
// configuration: every node must compute the same table for the same backends, so
// each node sends a given flow to the same backend.
const maglevSeed = "myelin-maglev-v1"

// Table returns the lookup table of Maglev consistent hashing (Eisenbud et al.,
// NSDI 2016) for backends, identified by name (addr:port), with m entries: each entry
// is an index into names. m must be prime and larger than len(names), which spreads
// every backend's preference list over the whole table. Backends get within one entry
// of an equal share, and removing a backend moves its entries and few others.
//
// The table depends only on names, their order and m, so callers must order names
// the same way on every node (Desired sorts backends by address and port).
func Table(names []string, m int) ([]int, error) {
	n := len(names)
	if n == 0 {
		return nil, nil
	}
	if m <= n || !IsPrime(m) {
		return nil, fmt.Errorf("maglev table size %d: must be a prime larger than the %d backends", m, n)
	}
	offset, skip := make([]int, n), make([]int, n)
	for i, name := range names {
		h := sha256.Sum256([]byte(maglevSeed + "\x00" + name))
		offset[i] = int(binary.BigEndian.Uint64(h[0:8]) % uint64(m))
		skip[i] = int(binary.BigEndian.Uint64(h[8:16])%uint64(m-1)) + 1
	}
	table := make([]int, m)
	for i := range table {
		table[i] = -1
	}
	next := make([]int, n)
	for filled := 0; ; {
		for i := 0; i < n; i++ {
			// Backend i's next preference that is still free: offset + j*skip mod m.
			c := (offset[i] + next[i]*skip[i]) % m
			for table[c] >= 0 {
				next[i]++
				c = (offset[i] + next[i]*skip[i]) % m
			}
			table[c] = i
			next[i]++
			if filled++; filled == m {
				return table, nil
			}
		}
	}
}

// IsPrime reports whether n is prime: Maglev table sizes must be.
func IsPrime(n int) bool {
	if n < 2 {
		return false
	}
	for d := 2; d*d <= n; d++ {
		if n%d == 0 {
			return false
		}
	}
	return true
}
