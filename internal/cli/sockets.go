package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"github.com/myelin-net/myelin/internal/api"
)

// sockets resolves which agents to talk to: an explicit socket, a lab node's socket,
// every lab node, or the node's default socket (or the only lab node's).
func sockets(socket, node string, all bool) ([]string, error) {
	switch {
	case socket != "":
		return []string{socket}, nil
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
