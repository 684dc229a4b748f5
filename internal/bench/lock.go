package bench

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// lockDir holds the bench's lock file, one per product prefix: two runs would replace
// each other's namespaces (<prefix>veth-c, ...) and labs mid-measurement.
const lockDir = "/run"

// errBenchBusy is returned while another bench run of the same prefix holds the lock.
var errBenchBusy = errors.New("another myelin bench is running on this machine")

// lockRun takes the lock of bench runs with prefix (a file in dir) without waiting; the
// returned function releases it and removes the file. The lock goes with the process,
// so a killed run leaves none held.
func lockRun(dir, prefix string) (func(), error) {
	path := filepath.Join(dir, strings.TrimSuffix(prefix, "-")+".lock")
	for range 10 {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock bench runs: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			holder, _ := os.ReadFile(path)
			f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, fmt.Errorf("%w (pid %s holds %s): wait for it to finish; it tears down what it built",
					errBenchBusy, strings.TrimSpace(string(holder)), path)
			}
			return nil, fmt.Errorf("lock %s: %w", path, err)
		}
		// A run that removed the file before unlocking leaves this lock on a file no
		// other run opens: take the one at path instead.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			_ = f.Truncate(0)
			_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			return func() { _ = os.Remove(path); f.Close() }, nil
		}
		f.Close()
	}
	return nil, fmt.Errorf("lock %s: it keeps being replaced; try again", path)
}
