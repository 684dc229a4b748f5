package agent

import (
	"errors"
	"io"
	"log/slog"
	"strings"
	"testing"
)

type fakeSockLB struct {
	attachErr, detachErr error
	attached, detached   int
	cgroup               string
}

func (f *fakeSockLB) AttachSocketLB(cg string) error {
	f.attached++
	f.cgroup = cg
	return f.attachErr
}

func (f *fakeSockLB) DetachSocketLB() error { f.detached++; return f.detachErr }

// TestStartSocketLB: active names the cgroup; an attach failure falls back to the
// tc path with the reason and leaves nothing attached; off (bpf-lb-sock or
// kube-proxy-replacement) detaches.
func TestStartSocketLB(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	p := nodePlan{KubeProxyReplacement: true, SocketLB: true, CgroupRoot: "/sys/fs/cgroup/unified/myelin-node-1"}

	f := &fakeSockLB{}
	v := startSocketLB(p, f, log)
	if f.cgroup != p.CgroupRoot || !strings.HasPrefix(v.text, "active on cgroup "+p.CgroupRoot) {
		t.Errorf("active: attached to %q, status %q", f.cgroup, v.text)
	}

	f = &fakeSockLB{attachErr: errors.New("attach sock-connect4 to cgroup X: operation not permitted")}
	v = startSocketLB(p, f, log)
	if !strings.Contains(v.text, "fallback to the tc path: attach sock-connect4") || f.detached == 0 {
		t.Errorf("fallback: status %q, detached %d times", v.text, f.detached)
	}

	// A detach that fails after a failed attach: hooks may stay, and the status says so.
	f = &fakeSockLB{attachErr: errors.New("attach sock-sendmsg4: operation not permitted"), detachErr: errors.New("unpin sock-connect4: busy")}
	v = startSocketLB(p, f, log)
	if !strings.Contains(v.text, "fallback to the tc path: attach sock-sendmsg4") || !strings.Contains(v.text, "detaching what was attached failed too: unpin sock-connect4") {
		t.Errorf("fallback with a failed detach: status %q", v.text)
	}

	p.SocketLB = false
	f = &fakeSockLB{}
	v = startSocketLB(p, f, log)
	if f.attached != 0 || f.detached != 1 || !strings.HasPrefix(v.text, "off (bpf-lb-sock is false)") {
		t.Errorf("off: attached %d, detached %d, status %q", f.attached, f.detached, v.text)
	}

	// Without kube-proxy-replacement the Service maps are no longer updated: links an
	// earlier agent pinned must go, whatever bpf-lb-sock says.
	f = &fakeSockLB{}
	if v := startSocketLB(nodePlan{SocketLB: true}, f, log); v.text != "" || f.detached != 1 || f.attached != 0 {
		t.Errorf("without kube-proxy-replacement: status %q, detached %d, attached %d; want none, 1, 0", v.text, f.detached, f.attached)
	}
}

// TestSocketLBCgroupRefusesMachineRoot: an agent in a netns of its own (a lab node)
// never attaches to the machine's root cgroup.
func TestSocketLBCgroupRefusesMachineRoot(t *testing.T) {
	if _, err := socketLBCgroup("", func() bool { return false }); err == nil || !strings.Contains(err.Error(), "set cgroup-root") {
		t.Errorf("unset cgroup-root off the host netns: got %v, want a refusal naming cgroup-root", err)
	}
	if got, err := socketLBCgroup("/x/y", func() bool { return false }); err != nil || got != "/x/y" {
		t.Errorf("cgroup-root /x/y: got %q, %v", got, err)
	}
}
