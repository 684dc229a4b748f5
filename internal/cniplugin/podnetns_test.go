package cniplugin

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"
)

// notNetNS are CNI_NETNS paths that are no network namespace, with what the error says.
func notNetNS(t *testing.T) map[string]string {
	dir := t.TempDir()
	leftover := filepath.Join(dir, "cni-leftover") // what a deleted netns's mount point leaves
	if err := os.WriteFile(leftover, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "cni-fifo") // an open(2) of it would wait for a writer
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		filepath.Join(dir, "cni-gone"): "does not exist",
		leftover:                       "is not a namespace",
		fifo:                           "is not a namespace",
		dir:                            "is not a namespace",
		"/proc/self/ns/mnt":            "a namespace of another kind",
		"/proc/thread-self/ns/net":     "the plugin's own network namespace",
	}
}

// ADD and CHECK refuse a CNI_NETNS that is no pod netns (code 8, naming the path and
// why) before they ask the agent anything: here there is no agent, and the answer
// would otherwise be "agent not available, try again later" (code 11) for ever, or
// with CNI_NETNS the node's own netns, a pod interface built in the node's.
func TestAddCheckRefuseBadNetNS(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock") // no agent: any call to it fails with code 11
	for path, want := range notNetNS(t) {
		for cmd, run := range map[string]func(*skel.CmdArgs) error{"ADD": cmdAdd, "CHECK": cmdCheck} {
			err := run(cniArgs(socket, "ctr-1", path))
			var ce *types.Error
			if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetNS || !strings.Contains(ce.Details, path) ||
				!strings.Contains(ce.Details, want) {
				t.Errorf("%s with CNI_NETNS %s = %v, want code 8 naming the path and %q", cmd, path, err, want)
			}
		}
	}
}

// DEL with a CNI_NETNS that is gone or no netns at all (a leftover file) has no pod
// interface to remove: success. With the plugin's own netns it would remove the
// node's interface of that name: refused (code 8) before anything is changed.
func TestDeletePodLinkNotANetNS(t *testing.T) {
	for path, why := range notNetNS(t) {
		err := deletePodLink(path, "mylnosuchif0")
		var ce *types.Error
		own := strings.Contains(why, "own")
		if own != (err != nil) || own && (!errors.As(err, &ce) || ce.Code != types.ErrInvalidNetNS) {
			t.Errorf("deletePodLink(%s) = %v, want success unless it is the plugin's own netns (then code 8)", path, err)
		}
	}
}

func TestDelRefusesOwnNetNS(t *testing.T) {
	dir := t.TempDir()
	socket := filepath.Join(dir, "agent.sock") // no agent
	args := cniArgs(socket, "ctr-own", "/proc/thread-self/ns/net")
	args.IfName = "mylnosuchif0"
	err := cmdDel(args)
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetNS {
		t.Errorf("DEL with CNI_NETNS the plugin's own netns = %v, want code 8", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "cni-deleted")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused DEL left a delete for the agent (%v)", err)
	}
}
