package link

import (
	"errors"
	"testing"

	"github.com/vishvananda/netlink"
)

func TestDumpRetriesInterrupted(t *testing.T) {
	calls := 0
	got, err := Dump("routes", func() ([]int, error) {
		calls++
		if calls < 3 {
			return []int{1}, netlink.ErrDumpInterrupted // partial, inconsistent
		}
		return []int{1, 2}, nil
	})
	if err != nil || len(got) != 2 || calls != 3 {
		t.Errorf("Dump = %v, %v after %d calls; want the complete [1 2] on the third", got, err, calls)
	}
}

func TestDumpGivesUp(t *testing.T) {
	_, err := Dump("routes", func() ([]int, error) { return nil, netlink.ErrDumpInterrupted })
	if !errors.Is(err, netlink.ErrDumpInterrupted) {
		t.Errorf("Dump of an always interrupted dump = %v, want ErrDumpInterrupted", err)
	}
	other := errors.New("permission denied")
	if _, err := Dump("routes", func() ([]int, error) { return nil, other }); !errors.Is(err, other) {
		t.Errorf("Dump = %v, want the dump's own error at once", err)
	}
}
