package agent

import (
	"errors"
	"reflect"
	"testing"

	"github.com/myelin-net/myelin/internal/metrics"
)

// The loops' runs and errors since start, and whether the last run failed, are what
// the controller metrics report; the GC's rounds and removed entries per table too.
func TestLoopAndGCCounts(t *testing.T) {
	l := newLoops()
	l.report("services", nil)
	l.report("services", errors.New("write frontend: map full"))
	l.report("nat-gc", errors.New("boom"))
	l.report("nat-gc", nil)
	want := []metrics.Controller{
		{Name: "services", Runs: 2, Errors: 1, Failing: true},
		{Name: "nat-gc", Runs: 2, Errors: 1, Failing: false},
	}
	if got := l.controllers(); !reflect.DeepEqual(got, want) {
		t.Errorf("controllers = %+v, want %+v", got, want)
	}
	var g gcStats
	g.add("nat", 3)
	g.add("service-ct", 0)
	g.add("nat", 2)
	wantGC := []metrics.GCStat{{Table: "nat", Runs: 2, Removed: 5}, {Table: "service-ct", Runs: 1}}
	if got := g.snapshot(); !reflect.DeepEqual(got, wantGC) {
		t.Errorf("gc stats = %+v, want %+v", got, wantGC)
	}
}
