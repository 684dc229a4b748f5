package cniplugin

import (
	"net/netip"

	"github.com/myelin-net/myelin/internal/api"
)

func apiEndpoint(ip netip.Addr, l podLink) api.Endpoint {
	return api.Endpoint{IP: ip.String(), PodMAC: l.PodMAC.String(), HostMAC: l.HostMAC.String()}
}
