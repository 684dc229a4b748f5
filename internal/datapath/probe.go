package datapath

import (
	"errors"
	"math"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Features says which kernel capabilities BPF host routing relies on are present.
type Features struct {
	// TCX is TCX attachment with BPF links (Linux 6.6).
	TCX bool
	// RedirectPeer is the bpf_redirect_peer helper (Linux 5.10).
	RedirectPeer bool
	// RedirectNeigh is the bpf_redirect_neigh helper (Linux 5.10).
	RedirectNeigh bool
	// FibLookup is the bpf_fib_lookup helper (Linux 4.18).
	FibLookup bool
	// RingBuf is the BPF ring buffer map (Linux 5.8).
	RingBuf bool
}

// Probe checks the running kernel. It needs the privileges to load BPF
// programs; without them every feature reads as missing.
func Probe() Features {
	helper := func(fn asm.BuiltinFunc) bool {
		return features.HaveProgramHelper(ebpf.SchedCLS, fn) == nil
	}
	return Features{
		TCX:           probeTCX(),
		RedirectPeer:  helper(asm.FnRedirectPeer),
		RedirectNeigh: helper(asm.FnRedirectNeigh),
		FibLookup:     helper(asm.FnFibLookup),
		RingBuf:       features.HaveMapType(ebpf.RingBuf) == nil,
	}
}

// Missing lists what the kernel lacks for BPF host routing, human-readable,
// e.g. "bpf_redirect_peer helper (Linux 5.10)". Empty when nothing is missing.
func (f Features) Missing() []string {
	var missing []string
	for _, c := range []struct {
		have bool
		name string
	}{
		{f.TCX, "TCX links (Linux 6.6)"},
		{f.RedirectPeer, "bpf_redirect_peer helper (Linux 5.10)"},
		{f.RedirectNeigh, "bpf_redirect_neigh helper (Linux 5.10)"},
		{f.FibLookup, "bpf_fib_lookup helper (Linux 4.18)"},
		{f.RingBuf, "BPF ring buffer (Linux 5.8)"},
	} {
		if !c.have {
			missing = append(missing, c.name)
		}
	}
	return missing
}

// probeTCX attaches a trivial program to an ifindex that cannot exist: a
// kernel with TCX fails with ENODEV (device lookup comes after the attach
// type is accepted); one without TCX, or a caller without privileges, fails
// otherwise. Nothing is ever attached.
func probeTCX() bool {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SchedCLS,
		Instructions: asm.Instructions{
			asm.Mov.Imm(asm.R0, 0),
			asm.Return(),
		},
		License: "Dual BSD/GPL",
	})
	if err != nil {
		return false
	}
	defer prog.Close()
	l, err := link.AttachTCX(link.TCXOptions{
		Interface: math.MaxInt32,
		Program:   prog,
		Attach:    ebpf.AttachTCXIngress,
	})
	if err == nil {
		l.Close()
		return true
	}
	return errors.Is(err, unix.ENODEV)
}
