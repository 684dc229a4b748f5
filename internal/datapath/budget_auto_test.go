package datapath

import (
	"testing"

	"github.com/myelin-net/myelin/internal/config"
)

// The "auto" per-pod budgets of the masquerade and Service conntrack tables are a
// quarter of the flows the programs' tables hold (two entries per flow). config
// keeps those flow counts as numbers, since it is resolved before the programs are
// read; this keeps them true when a table's size in bpf/lib/maps.h changes.
func TestAutoPodBudgetsAreAQuarterOfTheTables(t *testing.T) {
	spec, err := loadMyelin()
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range []struct {
		table  string
		budget int
	}{
		{"myelin_snat", c.NATPodBudget()},
		{"myelin_lb_ct", c.LBCTPodBudget()},
	} {
		m := spec.Maps[b.table]
		if m == nil {
			t.Fatalf("no map %s in the programs", b.table)
		}
		if flows := int(m.MaxEntries) / 2; b.budget != flows/4 {
			t.Errorf("auto budget of %s: %d flows, want a quarter of its %d flows (%d)", b.table, b.budget, flows, flows/4)
		}
	}
}
