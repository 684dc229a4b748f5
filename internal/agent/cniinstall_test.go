package agent

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/nodelayout"
)

// A datapath that fails to load or attach withdraws myelin's conflist (an earlier
// agent's), so the runtime reports the network not ready; other CNIs' files stay. An
// agent stopping on SIGTERM keeps it, and a missing conflist is not an error.
func TestDatapathFailureWithdrawsConflist(t *testing.T) {
	dir := t.TempDir()
	ours, other := filepath.Join(dir, nodelayout.CNIConfFile), filepath.Join(dir, "10-other.conflist")
	for _, f := range []string{ours, other} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s := &startup{cfg: Config{Node: "n1", CNIConfDir: dir}, cs: fake.NewSimpleClientset(), log: slog.Default()}

	stopping, cancel := context.WithCancel(context.Background())
	cancel()
	s.reportDatapathFailure(stopping, context.Canceled)
	if _, err := os.Stat(ours); err != nil {
		t.Fatalf("an agent stopping on SIGTERM removed the conflist: %v", err)
	}

	s.reportDatapathFailure(context.Background(), errors.New("attach to uplink eth0: operation not permitted"))
	if _, err := os.Stat(ours); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("after a datapath failure %s: stat err %v, want it removed", ours, err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("another CNI's conflist was touched: %v", err)
	}
	if err := withdrawConflist(s.cfg); err != nil {
		t.Errorf("withdrawConflist with no conflist: %v, want nil", err)
	}
}
