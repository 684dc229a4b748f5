package datapath

import "fmt"

// reasonNames names the C enum reason (bpf/lib/reasons.h). The names are
// stable: metrics, events and the CLI show them.
var reasonNames = map[myelinReason]string{
	myelinReasonREASON_FORWARDED:         "FORWARDED",
	myelinReasonREASON_PASS_STACK:        "PASS_STACK",
	myelinReasonDROP_INVALID_PACKET:      "DROP_INVALID_PACKET",
	myelinReasonDROP_NO_ROUTE:            "DROP_NO_ROUTE",
	myelinReasonDROP_REDIRECT_FAILED:     "DROP_REDIRECT_FAILED",
	myelinReasonDROP_TUNNEL_KEY:          "DROP_TUNNEL_KEY",
	myelinReasonDROP_NAT_FULL:            "DROP_NAT_FULL",
	myelinReasonDROP_NAT_NO_PORT:         "DROP_NAT_NO_PORT",
	myelinReasonDROP_SVC_NO_BACKEND:      "DROP_SVC_NO_BACKEND",
	myelinReasonDROP_SPOOFED_SOURCE:      "DROP_SPOOFED_SOURCE",
	myelinReasonDROP_UNSUPPORTED_L3:      "DROP_UNSUPPORTED_L3",
	myelinReasonDROP_UNKNOWN_TUNNEL_PEER: "DROP_UNKNOWN_TUNNEL_PEER",
	myelinReasonDROP_NODEPORT_NAT_FULL:   "DROP_NODEPORT_NAT_FULL",
	myelinReasonDROP_FRAG_NO_FLOW:        "DROP_FRAG_NO_FLOW",
	myelinReasonDROP_POD_TUNNEL:          "DROP_POD_TUNNEL",
	myelinReasonDROP_SVC_CT_FULL:         "DROP_SVC_CT_FULL",
	myelinReasonDROP_POLICY_DENIED:       "DROP_POLICY_DENIED",
	myelinReasonDROP_POLICY_MAP_FULL:     "DROP_POLICY_MAP_FULL",
	myelinReasonDROP_POLICY_CT_BUDGET:    "DROP_POLICY_CT_BUDGET",
	myelinReasonDROP_NAT_BUDGET:          "DROP_NAT_BUDGET",
	myelinReasonDROP_SVC_CT_BUDGET:       "DROP_SVC_CT_BUDGET",
	myelinReasonREASON_PLAIN_POD_TO_NODE: "PLAIN_POD_TO_NODE",
	myelinReasonREASON_FLOWS_LOST:        "FLOWS_LOST",
	myelinReasonREASON_FLOWS_LIMITED:     "FLOWS_LIMITED",
	myelinReasonREASON_EVENTS_LOST:       "EVENTS_LOST",
}

// directionNames names the C enum direction.
var directionNames = map[myelinDirection]string{
	myelinDirectionDIR_FROM_POD:     "from-pod",
	myelinDirectionDIR_FROM_NETDEV:  "from-netdev",
	myelinDirectionDIR_TO_NETDEV:    "to-netdev",
	myelinDirectionDIR_FROM_OVERLAY: "from-overlay",
	myelinDirectionDIR_TO_POD:       "to-pod",
}

// reasonByCode and directionByCode are the two maps as arrays indexed by the code
// ("" where it has no name): the agent names two codes per flow record, and an index
// costs less than a map lookup.
var reasonByCode, directionByCode = byCode(reasonNames), byCode(directionNames)

func byCode[K ~uint32, V any](names map[K]V) (out [256]V) {
	for k, name := range names {
		if k > 255 {
			panic(fmt.Sprintf("datapath: code %d does not fit a byte", k))
		}
		out[k] = name
	}
	return out
}

// ReasonName returns the stable name of a datapath reason code, such as
// "FORWARDED", "PASS_STACK" or "DROP_INVALID_PACKET", as used in metrics,
// events and the CLI. Unknown codes (a newer datapath) read "REASON_<n>".
func ReasonName(r uint8) string {
	if name := reasonByCode[r]; name != "" {
		return name
	}
	return fmt.Sprintf("REASON_%d", r)
}

// DirectionName returns the stable name of a datapath direction, such as
// "from-pod" or "from-netdev". Unknown codes read "dir-<n>".
func DirectionName(d uint8) string {
	if name := directionByCode[d]; name != "" {
		return name
	}
	return fmt.Sprintf("dir-%d", d)
}

// isDrop reports whether a reason is a drop.
func isDrop(r myelinReason) bool {
	return r != myelinReasonREASON_FORWARDED && r != myelinReasonREASON_PASS_STACK &&
		r != myelinReasonREASON_EVENTS_LOST && r != myelinReasonREASON_FLOWS_LOST &&
		r != myelinReasonREASON_FLOWS_LIMITED && r != myelinReasonREASON_PLAIN_POD_TO_NODE
}
