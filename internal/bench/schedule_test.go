package bench

import (
	"reflect"
	"testing"
)

func TestScheduleRoundRobin(t *testing.T) {
	got := Schedule([]string{"a", "b", "c"}, 2)
	want := []Slot{{1, "a"}, {1, "b"}, {1, "c"}, {2, "a"}, {2, "b"}, {2, "c"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Schedule = %v, want %v", got, want)
	}
	if got := Schedule([]string{"a"}, 0); len(got) != 0 {
		t.Errorf("Schedule with 0 rounds = %v, want nothing", got)
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
