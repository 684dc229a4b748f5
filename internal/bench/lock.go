package bench

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/myelin-net/myelin/internal/lockfile"
)

// lockDir holds the bench's lock file, one per product prefix: two runs would replace
// each other's namespaces (<prefix>veth-c, ...) and labs mid-measurement.
const lockDir = "/run"

// errBenchBusy is returned while another bench run of the same prefix holds the lock.
var errBenchBusy = errors.New("another myelin bench is running on this machine")

// lockRun takes the lock of bench runs with prefix (a file in dir) without waiting; the
// returned function releases it and removes the file.
func lockRun(dir, prefix string) (func(), error) {
	l, err := lockfile.TryLock(filepath.Join(dir, strings.TrimSuffix(prefix, "-")+".lock"))
	var held *lockfile.HeldError
	switch {
	case errors.As(err, &held):
		return nil, fmt.Errorf("%w (%s): wait for it to finish; it tears down what it built", errBenchBusy, held)
	case err != nil:
		return nil, fmt.Errorf("lock bench runs: %w", err)
	}
	return func() { l.Release(true) }, nil
}
