package lab

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseListeners(t *testing.T) {
	// Lines as the kernel prints them: addresses are 32-bit words in host byte order.
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1A0B 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1111 1 0000000000000000 100 0 0 10 0
   1: 010012C6:0941 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2222 1 0000000000000000 100 0 0 10 0
   2: 0100007F:0CEA 0100007F:A2B4 01 00000000:00000000 00:00000000 00000000     0        0 3333 1 0000000000000000 20 4 30 10 -1
`
	got := parseListeners(bufio.NewScanner(strings.NewReader(table)))
	if len(got) != 2 {
		t.Fatalf("got %d listeners, want 2 (the ESTABLISHED socket is not one): %+v", len(got), got)
	}
	if got[0].addr.String() != "0.0.0.0" || got[0].port != 6667 || got[0].inode != "1111" {
		t.Errorf("listener 0 = %+v, want 0.0.0.0:6667 inode 1111", got[0])
	}
	if got[1].addr.String() != "198.18.0.1" || got[1].port != 2369 {
		t.Errorf("listener 1 = %+v, want 198.18.0.1:2369", got[1])
	}
}

func TestParseProcAddrIPv6(t *testing.T) {
	a, ok := parseProcAddr("00000000000000000000000000000000")
	if !ok || !a.IsUnspecified() {
		t.Errorf("parseProcAddr(::) = %v %v", a, ok)
	}
	// ::ffff:198.18.0.1 maps to the IPv4 address.
	a, ok = parseProcAddr("0000000000000000FFFF0000010012C6")
	if !ok || a.String() != "198.18.0.1" {
		t.Errorf("parseProcAddr(v4-mapped) = %v %v, want 198.18.0.1", a, ok)
	}
}
