package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/myelin-net/myelin/internal/api"
)

// StateDirEnv names the agent's state directory for the CLI; the chart sets it in the
// agent's container, so `kubectl exec ds/myelin -- myelin status` finds its own node's
// agent also where several nodes' state dirs are mounted (the lab).
const StateDirEnv = "MYELIN_STATE_DIR"

// sockets resolves which agents to talk to: an explicit socket, a lab node's socket,
// every lab node, $MYELIN_STATE_DIR's agent, or the node's default socket (or the only
// lab node's).
func sockets(socket, node string, all bool) ([]string, error) {
	switch {
	case socket != "":
		return []string{socket}, nil
	case node == "" && !all && os.Getenv(StateDirEnv) != "":
		return []string{api.Socket(os.Getenv(StateDirEnv))}, nil
	case node != "":
		s := api.NodeSocket(node)
		if _, err := os.Stat(s); err != nil {
			return nil, fmt.Errorf("no agent socket for node %q at %s: is the node's agent running? (myelin lab status)", node, s)
		}
		return []string{s}, nil
	}
	labSockets, _ := filepath.Glob(api.NodeSocket("*"))
	sort.Strings(labSockets)
	if all {
		if _, err := os.Stat(api.DefaultSocket); err == nil {
			labSockets = append([]string{api.DefaultSocket}, labSockets...)
		}
		if len(labSockets) == 0 {
			return nil, fmt.Errorf("no myelin agent found on this machine (looked for %s and lab nodes)", api.DefaultSocket)
		}
		return labSockets, nil
	}
	if _, err := os.Stat(api.DefaultSocket); err == nil {
		return []string{api.DefaultSocket}, nil
	}
	switch len(labSockets) {
	case 0:
		return nil, fmt.Errorf("no myelin agent found on this machine (no %s, no lab nodes); is myelin-agent running?", api.DefaultSocket)
	case 1:
		return labSockets, nil
	}
	var names []string
	for _, s := range labSockets {
		names = append(names, filepath.Base(filepath.Dir(s)))
	}
	return nil, fmt.Errorf("several lab nodes run agents (%v): choose one with --node, or use --all", names)
}
