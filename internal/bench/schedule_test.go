package bench

import (
	"reflect"
	"testing"
)

func TestScheduleRoundRobin(t *testing.T) {
	got := Schedule([]Case{{Name: "a"}, {Name: "b"}, {Name: "c"}}, 3)
	want := []Slot{{1, "a"}, {1, "b"}, {1, "c"}, {2, "c"}, {2, "b"}, {2, "a"}, {3, "a"}, {3, "b"}, {3, "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Schedule = %v, want %v (every second round reversed)", got, want)
	}
	if got := Schedule([]Case{{Name: "a"}}, 0); len(got) != 0 {
		t.Errorf("Schedule with 0 rounds = %v, want nothing", got)
	}
}

// Each case runs right after its baseline when the baseline is selected, depth first
// (a baseline that has a baseline itself), siblings and roots in their given order; a
// baseline that is not selected leaves the case a root.
func TestSchedulePairsCasesWithTheirBaselines(t *testing.T) {
	cases := []Case{
		{Name: "policy/rr", Baseline: "bpf/rr"},
		{Name: "veth/rr"},
		{Name: "bpf/crr", Baseline: "veth/crr"},
		{Name: "bpf/rr", Baseline: "veth/rr"},
		{Name: "noflows/rr", Baseline: "bpf/rr"},
		{Name: "veth/crr"},
		{Name: "tunnel/rr", Baseline: "node/rr"}, // node/rr is not selected
	}
	got := pairOrder(cases)
	want := []string{"veth/rr", "bpf/rr", "policy/rr", "noflows/rr", "veth/crr", "bpf/crr", "tunnel/rr"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("pairOrder = %v, want %v", got, want)
	}
	if slots := scheduleRounds(cases, 4, 4); slots[0] != (Slot{4, "tunnel/rr"}) || slots[6] != (Slot{4, "veth/rr"}) {
		t.Errorf("round 4 = %v, want the pair order reversed", slots)
	}
}

func TestStagesKeepOrder(t *testing.T) {
	env := &fakeEnv{name: "e"}
	cases := []Case{
		{Name: "1", Env: env}, {Name: "t1", Stage: "tunnel", Env: env}, {Name: "2", Env: env}, {Name: "t2", Stage: "tunnel", Env: env},
	}
	var got [][]string
	for _, st := range stages(cases) {
		var names []string
		for _, c := range st {
			names = append(names, c.Name)
		}
		got = append(got, names)
	}
	want := [][]string{{"1", "2"}, {"t1", "t2"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stages = %v, want %v", got, want)
	}
}
