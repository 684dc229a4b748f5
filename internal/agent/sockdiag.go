package agent

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// sockDiagID is struct inet_diag_sockid (linux/inet_diag.h).
type sockDiagID struct {
	SPort, DPort [2]byte // network order
	Src, Dst     [16]byte
	If           uint32
	Cookie       [2]uint32
}

// sockDiagReq is struct inet_diag_req_v2: no extensions asked for (a dump
// with tcp_info costs several times more).
type sockDiagReq struct {
	Family, Protocol, Ext, Pad uint8
	States                     uint32
	ID                         sockDiagID
}

// tcpDiagReq is struct inet_diag_req, the request of TCPDIAG_GETSOCK (the
// first inet_diag interface), which dumps IPv4 and IPv6 TCP sockets in one
// walk of the socket tables: the kernel answers it as a request of family
// AF_UNSPEC, which the newer interface can't name. Each walk of the shared
// established table costs ~1.1 ms on this VM however few sockets the namespace
// holds.
type tcpDiagReq struct {
	Family, SrcLen, DstLen, Ext uint8
	ID                          sockDiagID
	States, Dbug                uint32
}

// tcpDiagGetSock is TCPDIAG_GETSOCK (linux/inet_diag.h).
const tcpDiagGetSock = 18

// dumpSeq is the sequence number of every dump request, which the kernel's
// answers carry.
const dumpSeq = 1

// sockDiagMsg is struct inet_diag_msg, the head of each answer.
type sockDiagMsg struct {
	Family, State, Timer, Retrans uint8
	ID                            sockDiagID
	Expires, RQueue, WQueue, UID  uint32
	Inode                         uint32
}

// podSocket is one socket of a pod's network namespace, its addresses IPv4
// (an IPv6 socket's v4-mapped ones unmapped: a dual-stack listener's).
type podSocket struct {
	proto       uint8
	state       uint8 // TCP states (include/net/tcp_states.h); a connected UDP socket's is tcpEstablished
	local, peer netip.AddrPort
}

// socketsOf dumps the sockets of proto in the states of mask (a bit per
// state) in the calling thread's network namespace, IPv4 and IPv6 alike
// (TCP in one walk, tcpDiagReq; UDP's table is small); IPv6 ones whose
// addresses are not v4-mapped are left out. A dump the kernel marks
// interrupted (the table changed while it was read) is read again (inet_diag
// does not mark its dumps today: a socket that moved meanwhile may be missed,
// and its connection is judged as new traffic). The namespace is the pod's:
// every answer (a socket of any family) takes one of *budget, and one more
// than it holds ends the read with errTooManySockets, so a pod can't make the
// agent decode and hold all of its sockets.
func socketsOf(proto uint8, mask uint32, budget *int) ([]podSocket, error) {
	families := []uint8{unix.AF_INET, unix.AF_INET6}
	if proto == unix.IPPROTO_TCP {
		families = []uint8{unix.AF_UNSPEC}
	}
	var out []podSocket
	for _, family := range families {
		var err error
		left := *budget
		for range 3 {
			var got []podSocket
			*budget = left // an interrupted dump is read again from the start
			if got, err = sockDiagDump(family, proto, mask, budget); err == nil {
				out = append(out, got...)
				break
			}
			if !errors.Is(err, errDumpInterrupted) {
				return nil, err
			}
		}
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

var errDumpInterrupted = errors.New("socket dump interrupted")

// errTooManySockets: a namespace answered with more sockets than the read's limit.
var errTooManySockets = errors.New("more sockets than the read's limit")

// sockDiagDump is one dump over NETLINK_SOCK_DIAG: SOCK_DIAG_BY_FAMILY, or
// for TCP of both families (family AF_UNSPEC) TCPDIAG_GETSOCK; each answer
// takes one of *budget (readDump).
func sockDiagDump(family, proto uint8, mask uint32, budget *int) ([]podSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_SOCK_DIAG)
	if err != nil {
		return nil, fmt.Errorf("open sock_diag socket: %w", err)
	}
	defer unix.Close(fd)
	var req any = sockDiagReq{Family: family, Protocol: proto, States: mask}
	typ := uint16(unix.SOCK_DIAG_BY_FAMILY)
	if family == unix.AF_UNSPEC && proto == unix.IPPROTO_TCP {
		req, typ = tcpDiagReq{States: mask}, tcpDiagGetSock
	}
	hdr := unix.NlMsghdr{Len: uint32(unix.NLMSG_HDRLEN + binary.Size(req)), Type: typ,
		Flags: unix.NLM_F_REQUEST | unix.NLM_F_DUMP, Seq: dumpSeq}
	b := make([]byte, 0, hdr.Len)
	b, _ = binary.Append(b, binary.NativeEndian, hdr)
	b, _ = binary.Append(b, binary.NativeEndian, req)
	if err := unix.Sendto(fd, b, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return nil, fmt.Errorf("ask for the sockets: %w", err)
	}
	return readDump(fd, proto, budget)
}

// readDump reads the answers of the dump asked for on fd, sockets of proto,
// until its end. Each answer takes one of *budget; one more than it holds
// ends the read with errTooManySockets (closing fd aborts the rest of the
// dump).
func readDump(fd int, proto uint8, budget *int) ([]podSocket, error) {
	var out []podSocket
	interrupted := false
	buf := make([]byte, 64<<10)
	for {
		n, from, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			return nil, fmt.Errorf("read the sockets: %w", err)
		}
		// Only the kernel's answers: a process of the pod with CAP_NET_ADMIN
		// over its namespace (its own user namespace) can send to this socket.
		if nl, ok := from.(*unix.SockaddrNetlink); !ok || nl.Pid != 0 {
			continue
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return nil, fmt.Errorf("read the sockets: %w", err)
		}
		for _, m := range msgs {
			if m.Header.Seq != dumpSeq {
				continue
			}
			if m.Header.Flags&unix.NLM_F_DUMP_INTR != 0 {
				interrupted = true
			}
			switch m.Header.Type {
			case unix.NLMSG_DONE:
				// A dump that failed says so here (a protocol without a
				// diag handler: a kernel without CONFIG_INET_UDP_DIAG).
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno < 0 {
						return nil, fmt.Errorf("read the sockets: %w", syscall.Errno(-errno))
					}
				}
				if interrupted {
					return nil, errDumpInterrupted
				}
				return out, nil
			case unix.NLMSG_ERROR:
				if len(m.Data) >= 4 {
					if errno := int32(binary.NativeEndian.Uint32(m.Data)); errno != 0 {
						return nil, fmt.Errorf("read the sockets: %w", syscall.Errno(-errno))
					}
				}
				return out, nil
			}
			if *budget--; *budget < 0 {
				return nil, errTooManySockets
			}
			var msg sockDiagMsg
			if _, err := binary.Decode(m.Data, binary.NativeEndian, &msg); err != nil {
				return nil, fmt.Errorf("read the sockets: %w", err)
			}
			if s, ok := podSocketOf(proto, &msg, v6Only(m.Data)); ok {
				out = append(out, s)
			}
		}
	}
}

// inetDiagSKV6Only is INET_DIAG_SKV6ONLY, the attribute the kernel adds to
// every IPv6 socket's answer: IPV6_V6ONLY is set.
const inetDiagSKV6Only = 11

// v6Only says whether the answer data (an inet_diag_msg and its attributes)
// is of an IPv6-only socket.
func v6Only(data []byte) bool {
	const msgLen = 72 // sizeof(struct inet_diag_msg)
	for a := data[min(msgLen, len(data)):]; len(a) >= 4; {
		l, typ := int(binary.NativeEndian.Uint16(a)), binary.NativeEndian.Uint16(a[2:])
		if l < 4 || l > len(a) {
			return false
		}
		if typ&0x3fff == inetDiagSKV6Only && l >= 5 {
			return a[4] != 0
		}
		a = a[min((l+3)&^3, len(a)):]
	}
	return false
}

// podSocketOf reads one answer; a socket of neither IPv4 nor v4-mapped
// addresses is none (false), nor is an IPv6-only listener (it takes no IPv4
// connection).
func podSocketOf(proto uint8, m *sockDiagMsg, v6only bool) (podSocket, bool) {
	if m.Family == unix.AF_INET6 && v6only {
		return podSocket{}, false
	}
	addr := func(a [16]byte) (netip.Addr, bool) {
		if m.Family == unix.AF_INET {
			return netip.AddrFrom4([4]byte(a[:4])), true
		}
		v := netip.AddrFrom16(a).Unmap()
		return v, v.Is4()
	}
	local, ok1 := addr(m.ID.Src)
	peer, ok2 := addr(m.ID.Dst)
	if m.Family == unix.AF_INET6 && local.IsUnspecified() {
		ok1 = true // "::": a dual-stack listener, unmapped to 0.0.0.0 below
	}
	if !ok1 || (!ok2 && m.State != tcpListen) {
		return podSocket{}, false
	}
	if !local.Is4() {
		local = netip.IPv4Unspecified()
	}
	if !peer.Is4() {
		peer = netip.IPv4Unspecified()
	}
	return podSocket{proto: proto, state: m.State,
		local: netip.AddrPortFrom(local, binary.BigEndian.Uint16(m.ID.SPort[:])),
		peer:  netip.AddrPortFrom(peer, binary.BigEndian.Uint16(m.ID.DPort[:]))}, true
}
