package datapath

import (
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// The tc programs write the packet only through helpers (lib/ipv4.h,
// ipv4_route_hop): a program with a direct packet write gets the verifier's
// prologue, which calls bpf_skb_pull_data on every cloned skb (every TCP
// segment a pod sends) before the program's first instruction. Each program,
// as the kernel runs it in native routing with load balancing and in tunnel
// mode, starts with its own first instruction, not with that prologue.
func TestPrivilegedNoDirectPacketWrites(t *testing.T) {
	requirePrivileged(t)
	for _, d := range []*Datapath{loadLB(t, HostRoutingBPF, 0), loadTunnelTest(t, HostRoutingBPF)} {
		for name, p := range map[string]*ebpf.Program{
			"myelin_from_pod": d.objs.MyelinFromPod, "myelin_to_pod": d.objs.MyelinToPod,
			"myelin_from_netdev": d.objs.MyelinFromNetdev, "myelin_to_netdev": d.objs.MyelinToNetdev,
			"myelin_from_overlay": d.objs.MyelinFromOverlay, "myelin_to_overlay": d.objs.MyelinToOverlay,
		} {
			info, err := p.Info()
			if err != nil {
				t.Fatalf("%s: %v", name, err)
			}
			insns, err := info.Instructions()
			if err != nil {
				t.Fatalf("%s: translated instructions: %v", name, err)
			}
			if uncloneProlog(insns) {
				t.Errorf("%s starts with the verifier's prologue for direct packet writes: %v", name, insns[:3])
			}
		}
	}
}

// uncloneProlog says whether insns start as the verifier's prologue for a
// tc program that writes the packet directly (bpf_unclone_prologue): a byte
// load from the context (skb->cloned), a mask, a jump over the
// bpf_skb_pull_data call when it is 0.
func uncloneProlog(insns asm.Instructions) bool {
	return len(insns) > 3 && insns[0].OpCode == asm.LoadMemOp(asm.Byte) && insns[0].Src == asm.R1 &&
		insns[1].OpCode.ALUOp() == asm.And && insns[2].OpCode.JumpOp() == asm.JEq && insns[2].Constant == 0
}
