package sysdump

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
)

// BPFObjects are the kernel's BPF programs named myelin_* and every BPF link, what a
// node without bpftool (the agent's image) can tell about them.
type BPFObjects struct {
	Programs []BPFProgram `json:"programs"`
	Links    []BPFLink    `json:"links"`
}

// BPFProgram is one loaded program.
type BPFProgram struct {
	ID   uint32 `json:"id"`
	Name string `json:"name"`
	Type string `json:"type"`
	Tag  string `json:"tag"`
}

// BPFLink is one link: its program and, for TCX links, the device it is attached to.
type BPFLink struct {
	ID      uint32 `json:"id"`
	Type    string `json:"type"`
	Program uint32 `json:"program"`
	Device  string `json:"device,omitempty"`
}

// ListBPFObjects reads the programs and links of the kernel (needs CAP_BPF or
// CAP_SYS_ADMIN).
func ListBPFObjects() (BPFObjects, error) {
	var out BPFObjects
	var id ebpf.ProgramID
	for {
		next, err := ebpf.ProgramGetNextID(id)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return out, fmt.Errorf("list BPF programs: %w", err)
		}
		id = next
		p, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone meanwhile
		}
		if info, err := p.Info(); err == nil && strings.HasPrefix(info.Name, "myelin") {
			out.Programs = append(out.Programs, BPFProgram{ID: uint32(id), Name: info.Name, Type: info.Type.String(), Tag: info.Tag})
		}
		p.Close()
	}
	it := new(link.Iterator)
	defer it.Close()
	for it.Next() {
		info, err := it.Link.Info()
		if err != nil {
			continue
		}
		l := BPFLink{ID: uint32(info.ID), Type: fmt.Sprint(info.Type), Program: uint32(info.Program)}
		if tcx := info.TCX(); tcx != nil {
			if ifc, err := net.InterfaceByIndex(int(tcx.Ifindex)); err == nil {
				l.Device = ifc.Name
			} else {
				l.Device = fmt.Sprintf("ifindex %d (another netns)", tcx.Ifindex)
			}
		}
		out.Links = append(out.Links, l)
	}
	return out, it.Err()
}
