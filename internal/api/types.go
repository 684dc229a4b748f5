package api

import (
	"path/filepath"
	"time"

	"github.com/myelin-net/myelin/internal/nodelayout"
)

// socketName is the agent's API socket in its state directory.
const socketName = "agent.sock"

// PodGateway is the link-local next hop of every pod's default route, the same on
// every node: the agent hands it out with each address, the plugin sets it up and
// CHECK verifies it. Its neighbour entry is fixed to the host-side veth's MAC, so the
// address itself is never on a link.
const PodGateway = "169.254.1.1"

// DefaultSocket is the agent's socket on a real node.
const DefaultSocket = nodelayout.StateDir + "/" + socketName

// Socket is the API socket of an agent whose state directory is stateDir.
func Socket(stateDir string) string { return filepath.Join(stateDir, socketName) }

// NodeSocket is the API socket of the agent of lab node node (which may be a glob
// pattern): each lab node's agent keeps its state in its own directory.
func NodeSocket(node string) string {
	return Socket(nodelayout.PerNode(nodelayout.StateDir, node))
}

// PodRef identifies the Pod and the CNI attachment an endpoint belongs to.
type PodRef struct {
	ContainerID string `json:"containerID"`
	IfName      string `json:"ifName"`
	Namespace   string `json:"namespace"`
	Pod         string `json:"pod"`
	PodUID      string `json:"podUID,omitempty"`
	NetNS       string `json:"netns"`
}

// Allocation is the agent's answer to an IP allocation: what the plugin needs to
// build the pod's interface.
type Allocation struct {
	IP         string `json:"ip"`         // pod address, e.g. 10.244.1.7
	Gateway    string `json:"gateway"`    // link-local next hop of the pod's default route
	MTU        int    `json:"mtu"`        // MTU of the pod's interface
	RouteMTU   int    `json:"routeMTU"`   // MTU of the pod's default route (less in tunnel mode)
	HostIfName string `json:"hostIfName"` // name of the host-side veth
	// GSOIPv4MaxSize is the IPv4 GSO and GRO size of both veth ends with BIG TCP on
	// (enable-ipv4-big-tcp); 0 leaves the kernel's 64 KiB.
	GSOIPv4MaxSize int `json:"gsoIPv4MaxSize,omitempty"`
	// Attempt names this allocation call among the ADDs of the container id in flight
	// (a runtime may retry an ADD before the first has answered); a failed ADD's
	// release names it (Client.Release), so the agent frees the IP only when no other
	// ADD of the container id holds it. Empty from agents before it was named.
	Attempt string `json:"attempt,omitempty"`
}

// Endpoint is a pod's network attachment as the agent knows it.
type Endpoint struct {
	PodRef
	ID          uint16    `json:"id"`
	IP          string    `json:"ip"`
	HostIfName  string    `json:"hostIfName"`
	HostIfIndex int       `json:"hostIfIndex"`
	HostMAC     string    `json:"hostMAC"`
	PodMAC      string    `json:"podMAC"`
	Created     time.Time `json:"created"`
}

// GCRequest lists the attachments the runtime still has; the agent removes the rest.
type GCRequest struct {
	Keep []string `json:"keep"` // container ids
}

// GCResult says what GC removed.
type GCResult struct {
	Removed []string `json:"removed"`
}

// Health is the agent's readiness.
type Health struct {
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
}

// ErrorBody is the body of every non-2xx answer. Retry says the refusal passes by
// itself (addresses that Pods being deleted still hold, a Pod cache still syncing):
// the caller should try again later, and the client returns ErrRetry.
type ErrorBody struct {
	Error string `json:"error"`
	Retry bool   `json:"retry,omitempty"`
}

// ConfigView is a node's effective configuration: every key, its value and its source.
type ConfigView struct {
	Node      string        `json:"node"`
	Effective []ConfigEntry `json:"effective"`
	// Warning is set when the configuration is not what the operator may think,
	// e.g. the ConfigMap kube-system/myelin-config does not exist.
	Warning string `json:"warning,omitempty"`
}

// ConfigEntry is one configuration key's effective value and where it came from.
type ConfigEntry struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"`
}

// Services is GET /v1/services: the Service frontends programmed in the node's
// datapath, or who serves Services when myelin doesn't.
type Services struct {
	Node string `json:"node"`
	// ServedBy is "myelin" (kube-proxy-replacement true) or "kube-proxy".
	ServedBy  string `json:"servedBy"`
	Algorithm string `json:"algorithm,omitempty"` // random or maglev
	// Synced is false until every Service that existed at start is programmed.
	Synced    bool              `json:"synced"`
	Frontends []ServiceFrontend `json:"frontends"`
}

// ServiceFrontend is one programmed frontend: how clients reach a Service port here.
type ServiceFrontend struct {
	Service  string `json:"service"` // namespace/name; "" for an entry no Service claims yet
	Port     string `json:"port,omitempty"`
	Type     string `json:"type"`     // ClusterIP or NodePort
	Frontend string `json:"frontend"` // addr:port/PROTO
	ID       uint32 `json:"id"`
	Affinity string `json:"affinity,omitempty"` // ClientIP timeout, e.g. "10800s"
	// ExternalTrafficPolicy is "Local" on a NodePort frontend whose clients from
	// outside the node get only the backends marked local; the node's own get any.
	ExternalTrafficPolicy string           `json:"externalTrafficPolicy,omitempty"`
	Backends              []ServiceBackend `json:"backends"`
}

// ServiceBackend is one backend of a frontend.
type ServiceBackend struct {
	Address string `json:"address"` // addr:port
	ID      uint32 `json:"id"`
	State   string `json:"state"`           // active (takes new connections) or terminating
	Local   bool   `json:"local,omitempty"` // with externalTrafficPolicy Local: the node's own, outside clients' pool
}
