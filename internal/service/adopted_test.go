package service

import (
	"testing"

	"github.com/myelin-net/myelin/internal/datapath"
)

// countingDatapath counts the service entries written.
type countingDatapath struct {
	*fakeDatapath
	writes int
}

func (c *countingDatapath) UpsertService(fe datapath.Frontend, s datapath.Service) error {
	c.writes++
	return c.fakeDatapath.UpsertService(fe, s)
}

// After a restart a Service programmed as it still is costs no write; one that
// changed while the agent was down is written, and later changes are written too.
func TestManagerRestartWritesOnlyChanges(t *testing.T) {
	dp := &countingDatapath{fakeDatapath: newFake()}
	m, _ := NewManager(dp, 0)
	same := frontend("10.96.0.10", 80, "10.244.1.5:8080", "10.244.1.6:8080")
	changed := frontend("10.96.0.11", 80, "10.244.2.5:8080")
	if err := m.Apply("default/same", []Frontend{same}); err != nil {
		t.Fatal(err)
	}
	if err := m.Apply("default/changed", []Frontend{changed}); err != nil {
		t.Fatal(err)
	}

	dp.writes = 0
	m2, err := NewManager(dp, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := m2.Apply("default/same", []Frontend{same}); err != nil {
		t.Fatal(err)
	}
	if dp.writes != 0 {
		t.Errorf("an unchanged Service was written %d times after the restart", dp.writes)
	}
	changed.Active = append(changed.Active, be("10.244.2.6:8080"))
	if err := m2.Apply("default/changed", []Frontend{changed}); err != nil {
		t.Fatal(err)
	}
	if dp.writes != 1 || len(dp.services[changed.Key].Backends) != 2 {
		t.Errorf("a changed Service: %d writes, programmed %+v; want 1 write of 2 backends", dp.writes, dp.services[changed.Key])
	}
	same.Active = same.Active[:1]
	if err := m2.Apply("default/same", []Frontend{same}); err != nil {
		t.Fatal(err)
	}
	if dp.writes != 2 || len(dp.services[same.Key].Backends) != 1 {
		t.Errorf("a later change: %d writes, programmed %+v; want 2 writes, 1 backend", dp.writes, dp.services[same.Key])
	}
}
