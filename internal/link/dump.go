package link

import (
	"errors"
	"fmt"

	"github.com/vishvananda/netlink"
)

// dumpTries bounds how often Dump repeats an interrupted dump.
const dumpTries = 10

// Dump runs a netlink dump (RouteListFiltered, AddrList, NeighList, ...) again while
// the kernel reports it interrupted (netlink.ErrDumpInterrupted: the table changed
// during the dump and the answer may be inconsistent), so callers only ever decide on
// a complete answer. After dumpTries interrupted tries it returns the error.
func Dump[T any](what string, dump func() ([]T, error)) ([]T, error) {
	var err error
	for range dumpTries {
		var out []T
		out, err = dump()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			return out, err
		}
	}
	return nil, fmt.Errorf("dump %s: interrupted %d times in a row by concurrent changes: %w", what, dumpTries, err)
}
