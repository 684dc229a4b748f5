package maglev

import (
	"fmt"
	"testing"
)

func backendNames(n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("10.244.%d.%d:8080", i/200, i%200+10)
	}
	return names
}

// mustTable is Table for inputs that must be accepted: an error would leave a nil table
// that the comparisons below would pass vacuously.
func mustTable(t *testing.T, names []string, m int) []int {
	t.Helper()
	table, err := Table(names, m)
	if err != nil || len(table) != m {
		t.Fatalf("Table(%d backends, %d) = %d entries, %v; want %d entries", len(names), m, len(table), err, m)
	}
	return table
}

func TestMaglevBalanced(t *testing.T) {
	const m = 16381
	for _, n := range []int{1, 2, 3, 10, 100} {
		table, err := Table(backendNames(n), m)
		if err != nil {
			t.Fatal(err)
		}
		count := make([]int, n)
		for _, b := range table {
			if b < 0 || b >= n {
				t.Fatalf("n=%d: entry %d out of range", n, b)
			}
			count[b]++
		}
		// Round-robin filling gives every backend floor(m/n) or that plus one.
		for i, c := range count {
			if c < m/n || c > m/n+1 {
				t.Errorf("n=%d: backend %d has %d entries, want %d or %d", n, i, c, m/n, m/n+1)
			}
		}
	}
}

func TestMaglevDeterministic(t *testing.T) {
	a := mustTable(t, backendNames(5), 251)
	b := mustTable(t, backendNames(5), 251)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("entry %d differs between two computations: %d vs %d", i, a[i], b[i])
		}
	}
}

// TestMaglevRemoveOneBackend checks the property lb-algorithm maglev exists for:
// removing one backend moves that backend's flows and few others.
func TestMaglevRemoveOneBackend(t *testing.T) {
	const m, n = 16381, 10
	names := backendNames(n)
	before := mustTable(t, names, m)
	removed := 3
	rest := append(append([]string{}, names[:removed]...), names[removed+1:]...)
	after := mustTable(t, rest, m)

	var moved, others int
	for i := range before {
		if before[i] == removed {
			continue // these must move; they go to whoever is next in line
		}
		others++
		if rest[after[i]] != names[before[i]] {
			moved++
		}
	}
	frac := float64(moved) / float64(others)
	t.Logf("entries of the %d remaining backends that moved: %d of %d (%.2f%%)", n-1, moved, others, 100*frac)
	// A modulo table would move ~90% of them; Maglev's paper reports a few percent.
	if frac > 0.05 {
		t.Errorf("%.1f%% of the remaining backends' entries moved, want at most 5%%", 100*frac)
	}
	for i := range before {
		if before[i] == removed && rest[after[i]] == names[removed] {
			t.Fatalf("entry %d still points at the removed backend", i)
		}
	}
}

func TestMaglevRejectsBadSize(t *testing.T) {
	for _, tc := range []struct {
		n, m int
	}{{2, 16380}, {5, 5}, {5, 3}} {
		if _, err := Table(backendNames(tc.n), tc.m); err == nil {
			t.Errorf("n=%d m=%d: want an error", tc.n, tc.m)
		}
	}
	if table, err := Table(nil, 251); err != nil || table != nil {
		t.Errorf("no backends: got %v, %v; want nil, nil", table, err)
	}
}

func TestIsPrime(t *testing.T) {
	for n, want := range map[int]bool{0: false, 1: false, 2: true, 251: true, 16381: true, 16383: false, 65521: true, 131071: true, 131073: false} {
		if IsPrime(n) != want {
			t.Errorf("IsPrime(%d) = %v, want %v", n, !want, want)
		}
	}
}
