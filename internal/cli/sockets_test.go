package cli

import (
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// Inside the agent's pod MYELIN_STATE_DIR names the node's own agent; --node and
// --socket still win.
func TestSocketsStateDirEnv(t *testing.T) {
	t.Setenv(StateDirEnv, "/run/myelin/node-a")
	got, err := sockets("", "", false)
	if err != nil || len(got) != 1 || got[0] != api.Socket("/run/myelin/node-a") {
		t.Errorf("sockets with %s = %v, %v; want the socket in that dir", StateDirEnv, got, err)
	}
	if got, _ := sockets("/x.sock", "", false); got[0] != "/x.sock" {
		t.Errorf("--socket = %v, want /x.sock", got)
	}
}
