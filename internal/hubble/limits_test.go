package hubble

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/myelin-net/myelin/internal/flow"
	"github.com/myelin-net/myelin/internal/flowstore"
)

func TestRequestCapsFilterValues(t *testing.T) {
	pods := make([]string, MaxFilterValues)
	for i := range pods {
		pods[i] = "ns/pod-" + strconv.Itoa(i)
	}
	_, err := Request(&observerpb.GetFlowsRequest{Whitelist: []*flowpb.FlowFilter{{SourcePod: pods}}})
	if err == nil || !strings.Contains(err.Error(), strconv.Itoa(MaxFilterValues)) {
		t.Errorf("Request with %d pods: err %v, want one naming the limit %d", len(pods), err, MaxFilterValues)
	}
	if _, err := Request(&observerpb.GetFlowsRequest{Whitelist: []*flowpb.FlowFilter{{SourcePod: pods[:MaxFilterValues-1]}}}); err != nil {
		t.Errorf("Request with %d values (at the limit): %v", MaxFilterValues, err)
	}
}

// Every filter is tried on every flow, whatever its values: a list of more than
// flow.MaxFilters is refused before any is converted, naming the list and the limit
// (hubble observe sends one or two).
func TestRequestCapsFilters(t *testing.T) {
	ffs := make([]*flowpb.FlowFilter, flow.MaxFilters+1)
	for i := range ffs {
		ffs[i] = &flowpb.FlowFilter{DestinationIp: []string{"10.0.0." + strconv.Itoa(i)}}
	}
	_, err := Request(&observerpb.GetFlowsRequest{Blacklist: ffs})
	if err == nil || !strings.Contains(err.Error(), "the blacklist has 17 filters, at most 16 are allowed") {
		t.Errorf("Request with %d blacklist filters: err %v, want one naming the list and the limit", len(ffs), err)
	}
	if _, err := Request(&observerpb.GetFlowsRequest{Whitelist: ffs[:flow.MaxFilters], Blacklist: ffs[1:]}); err != nil {
		t.Errorf("Request with %d filters in each list (at the limit): %v", flow.MaxFilters, err)
	}
}

// One follow stream beyond the store's limit is refused with ResourceExhausted.
func TestServerFollowLimit(t *testing.T) {
	store := flowstore.New(10)
	c := observerpb.NewObserverClient(dialServer(t, NewServer(Config{Source: store})))
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := 0; i < flowstore.MaxFollowers; i++ {
		if _, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true}); err != nil {
			t.Fatal(err)
		}
	}
	for store.Stats().Followers != flowstore.MaxFollowers {
		if ctx.Err() != nil {
			t.Fatal(ctx.Err())
		}
		time.Sleep(time.Millisecond)
	}
	stream, err := c.GetFlows(ctx, &observerpb.GetFlowsRequest{Follow: true})
	if err == nil {
		_, err = stream.Recv()
	}
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), strconv.Itoa(flowstore.MaxFollowers)) {
		t.Errorf("follow stream %d: %v, want ResourceExhausted naming %d", flowstore.MaxFollowers+1, err, flowstore.MaxFollowers)
	}
}

func TestNodeAddress(t *testing.T) {
	ip := netip.MustParseAddr("198.18.0.11")
	for _, tc := range []struct {
		addr net.Addr
		want string
	}{
		{&net.TCPAddr{IP: net.IPv6unspecified, Port: 4244}, "198.18.0.11:4244"},
		{&net.TCPAddr{IP: net.IPv4zero, Port: 4244}, "198.18.0.11:4244"},
		{&net.TCPAddr{IP: net.ParseIP("10.0.0.1"), Port: 4244}, "10.0.0.1:4244"},
		{&net.UnixAddr{Name: "/run/myelin/hubble.sock", Net: "unix"}, "/run/myelin/hubble.sock"},
	} {
		if got := NodeAddress(tc.addr, ip); got != tc.want {
			t.Errorf("NodeAddress(%v) = %q, want %q", tc.addr, got, tc.want)
		}
	}
}
