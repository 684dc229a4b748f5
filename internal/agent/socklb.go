package agent

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/datapath"
)

// socketLBView is what status shows of socket-level load balancing (bpf-lb-sock):
// active and where, off, or the tc path with the reason it could not attach.
type socketLBView struct {
	text   string
	active bool // attached: Services are translated at connect()
}

func (v socketLBView) fillStatus(s *api.Status) { s.SocketLB = v.text }

// socketLBAttacher is the part of the datapath startSocketLB uses.
type socketLBAttacher interface {
	AttachSocketLB(cgroup string) error
	DetachSocketLB() error
}

// startSocketLB attaches socket-LB as the plan says, or detaches it (bpf-lb-sock
// false, or it can't attach): Services are then served by the tc path alone, never
// not at all. The result is the status line; a fallback is logged as a warning.
func startSocketLB(p nodePlan, dp socketLBAttacher, log *slog.Logger) socketLBView {
	if !p.KubeProxyReplacement || !p.SocketLB {
		// Detach in both cases: links pinned by an earlier agent would otherwise keep
		// translating with Service maps nobody updates any more.
		if err := dp.DetachSocketLB(); err != nil {
			log.Warn("detach socket-LB", "key", "bpf-lb-sock", "err", err)
		}
		if !p.KubeProxyReplacement {
			return socketLBView{}
		}
		return socketLBView{text: "off (bpf-lb-sock is false): Services are translated per packet by the tc programs"}
	}
	root, err := socketLBCgroup(p.CgroupRoot, isHostNetns)
	if err == nil {
		err = dp.AttachSocketLB(root)
	}
	if err != nil {
		if derr := dp.DetachSocketLB(); derr != nil {
			// Some hooks may still translate, with maps this agent keeps updating.
			err = fmt.Errorf("%w; detaching what was attached failed too: %v", err, derr)
		}
		log.Warn("socket-LB is not active, Services are served by the tc path", "key", "bpf-lb-sock", "reason", err)
		return socketLBView{text: fmt.Sprintf("fallback to the tc path: %v", err)}
	}
	return socketLBView{text: fmt.Sprintf("active on cgroup %s: Services translated at connect()/sendmsg(), the tc path for NodePort from outside", root), active: true}
}

// socketLBCgroup is the cgroup socket-LB attaches to: cgroup-root, else the cgroup2
// mount. The mount (the machine's root cgroup) is refused to an agent outside the
// host network namespace, a lab node: it would translate for every process on the
// machine.
func socketLBCgroup(root string, hostNetns func() bool) (string, error) {
	if root != "" {
		return root, nil
	}
	mnt, err := datapath.Cgroup2Mount()
	if err != nil {
		return "", err
	}
	if !hostNetns() {
		return "", fmt.Errorf("cgroup-root is unset, so socket-LB would attach to the machine's root cgroup %s, but this agent runs in a network namespace of its own (a lab node?): set cgroup-root to the cgroup holding only this node's processes", mnt)
	}
	return mnt, nil
}

// isHostNetns reports whether the agent runs in the network namespace of PID 1:
// the agent's pod has hostNetwork but not hostPID, so the PID 1 it sees (in its
// own PID namespace) is in the host network namespace too. Not netns.IsMachine, which needs the
// machine's PID namespace on kernels that give the initial network namespace no
// fixed inode number.
func isHostNetns() bool {
	self, err1 := os.Readlink("/proc/self/ns/net")
	init, err2 := os.Readlink("/proc/1/ns/net")
	return err1 == nil && err2 == nil && self == init
}
