package hubble

import (
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	flowpb "github.com/cilium/cilium/api/v1/flow"
	observerpb "github.com/cilium/cilium/api/v1/observer"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/myelin-net/myelin/internal/flow"
)

// supportedFields are the FlowFilter fields myelin's flows can answer; a filter setting
// any other field is refused rather than silently matching everything.
var supportedFields = map[protoreflect.Name]bool{
	"source_pod": true, "destination_pod": true, "source_ip": true, "destination_ip": true,
	"source_service": true, "destination_service": true, "verdict": true, "event_type": true,
	"protocol": true, "source_port": true, "destination_port": true, "node_name": true,
	"traffic_direction": true,
}

// flagOf names the hubble observe flag that sets a FlowFilter field, for error messages.
var flagOf = map[protoreflect.Name]string{
	"source_label": "--label/--from-label", "destination_label": "--label/--to-label",
	"source_fqdn": "--fqdn/--from-fqdn", "destination_fqdn": "--fqdn/--to-fqdn",
	"http_status_code": "--http-status", "http_method": "--http-method", "http_path": "--http-path",
	"http_url": "--http-url", "http_header": "--http-header", "tcp_flags": "--tcp-flags",
	"reply": "--is-reply", "dns_query": "--dns-query", "source_identity": "--from-identity",
	"destination_identity": "--to-identity", "ip_version": "--ipv4/--ipv6", "trace_id": "--trace-id",
	"source_workload": "--workload/--from-workload", "destination_workload": "--workload/--to-workload",
	"drop_reason_desc": "--drop-reason-desc", "interface": "--interface", "uuid": "--uuid",
	"source_ip_xlated": "--snat-ip", "node_labels": "--node-label", "experimental": "--cel-expression",
	"source_cluster_name": "--cluster", "destination_cluster_name": "--cluster",
}

// MaxFilterValues bounds a request's filters: every value of every field of every
// whitelist and blacklist filter counts one. Each flow is matched against them while a
// stream lasts, so a request beyond it is refused (flow.MaxFilterValues, which the
// flow store checks too).
const MaxFilterValues = flow.MaxFilterValues

// checkSize refuses filters beyond flow's limits before any is converted: too many
// values, a value longer than flow.MaxFilterValueLen (named by its field), or values
// longer than flow.MaxFilterBytes together. A list field counts its length, a
// string's text its bytes.
func checkSize(lists ...[]*flowpb.FlowFilter) error {
	values, bytes := 0, 0
	var bad error
	for _, ffs := range lists {
		for _, ff := range ffs {
			values++ // the filter itself
			ff.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
				if !fd.IsList() {
					values++
					return true
				}
				l := v.List()
				values += l.Len()
				if fd.Kind() != protoreflect.StringKind {
					return true
				}
				for i := range l.Len() {
					s := l.Get(i).String()
					if len(s) > flow.MaxFilterValueLen {
						bad = fmt.Errorf("get flows: filter %s %s: longer than %d bytes, the longest namespace/name a filter can hold",
							fd.Name(), flow.QuoteValue(s), flow.MaxFilterValueLen)
						return false
					}
					bytes += len(s)
				}
				return true
			})
			if bad != nil {
				return bad
			}
		}
	}
	if values > MaxFilterValues {
		return fmt.Errorf("get flows: the filters have %d values (filters, pods, IPs, ports, ...), at most %d are allowed: split the query or filter with fewer values", values, MaxFilterValues)
	}
	if bytes > flow.MaxFilterBytes {
		return fmt.Errorf("get flows: the filters' values have %d bytes, at most %d are allowed: split the query or filter with fewer values", bytes, flow.MaxFilterBytes)
	}
	return nil
}

// Request turns a Hubble GetFlowsRequest into the flow.Request a Source answers. A
// filter field myelin cannot answer, a malformed value (an IP or CIDR is parsed
// here, once), or filters beyond flow's limits (more than flow.MaxFilters per list,
// too many values) are an error naming them.
func Request(req *observerpb.GetFlowsRequest) (flow.Request, error) {
	if req.GetFirst() {
		return flow.Request{}, fmt.Errorf("get flows: --first is not supported by myelin: use --last N or --since")
	}
	if err := flow.CheckFilterCount(len(req.GetWhitelist()), len(req.GetBlacklist())); err != nil {
		return flow.Request{}, fmt.Errorf("get flows: %w", err)
	}
	if err := checkSize(req.GetWhitelist(), req.GetBlacklist()); err != nil {
		return flow.Request{}, err
	}
	r := flow.Request{Last: int(req.GetNumber()), Follow: req.GetFollow()}
	if req.GetSince() != nil {
		r.Since = req.GetSince().AsTime()
	}
	if req.GetUntil() != nil {
		r.Until = req.GetUntil().AsTime()
	}
	var err error
	if r.Whitelist, err = filters("whitelist", req.GetWhitelist()); err != nil {
		return flow.Request{}, err
	}
	if r.Blacklist, err = filters("blacklist", req.GetBlacklist()); err != nil {
		return flow.Request{}, err
	}
	return r, nil
}

func filters(list string, in []*flowpb.FlowFilter) ([]flow.Filter, error) {
	var out []flow.Filter
	for i, ff := range in {
		f, err := Filter(ff)
		if err != nil {
			return nil, fmt.Errorf("%s filter %d: %w", list, i, err)
		}
		out = append(out, f)
	}
	return out, nil
}

// Filter converts one Hubble FlowFilter. Hubble's --port and --from-port/--to-port all
// become Port (either port): myelin's filter has no per-side port.
func Filter(ff *flowpb.FlowFilter) (flow.Filter, error) {
	var bad error
	ff.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		if !supportedFields[fd.Name()] {
			flag := flagOf[fd.Name()]
			if flag == "" {
				flag = "its flag"
			}
			bad = fmt.Errorf("filter field %s (hubble observe %s) is not supported by myelin: drop %s; supported: --pod, --namespace, --from-pod, --to-pod, --ip, --service, --to-service, --verdict, --type, --protocol, --port, --node-name, --traffic-direction", fd.Name(), flag, flag)
			return false
		}
		return true
	})
	if bad != nil {
		return flow.Filter{}, bad
	}
	f := flow.Filter{
		SourcePod: ff.GetSourcePod(), DestinationPod: ff.GetDestinationPod(),
		SourceService: ff.GetSourceService(), DestinationService: ff.GetDestinationService(),
		Node: ff.GetNodeName(),
	}
	for _, v := range ff.GetVerdict() {
		f.Verdict = append(f.Verdict, flow.Verdict(v.String()))
	}
	for _, d := range ff.GetTrafficDirection() {
		f.Direction = append(f.Direction, flow.Direction(d.String()))
	}
	var err error
	if f.SourceIP, err = ips("source_ip", ff.GetSourceIp()); err != nil {
		return flow.Filter{}, err
	}
	if f.DestinationIP, err = ips("destination_ip", ff.GetDestinationIp()); err != nil {
		return flow.Filter{}, err
	}
	if f.Protocol, err = protocols(ff.GetProtocol()); err != nil {
		return flow.Filter{}, err
	}
	if f.Type, err = eventTypes(ff.GetEventType()); err != nil {
		return flow.Filter{}, err
	}
	for _, p := range append(ff.GetSourcePort(), ff.GetDestinationPort()...) {
		n, err := strconv.ParseUint(p, 10, 16)
		if err != nil || n == 0 {
			return flow.Filter{}, fmt.Errorf("filter port %q: not a port number (1-65535)", p)
		}
		f.Port = append(f.Port, uint16(n))
	}
	return f, nil
}

// ips parses the IP filter values of field (an address or a CIDR each).
func ips(field string, in []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range in {
		p, err := flow.ParseIP(s)
		if err != nil {
			return nil, fmt.Errorf("filter %s %w", field, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func protocols(in []string) ([]string, error) {
	var out []string
	for _, p := range in {
		switch l := strings.ToLower(p); l {
		case "tcp", "udp", "sctp", "icmp":
			out = append(out, l)
		case "icmpv4", "icmpv6":
			out = append(out, "icmp")
		default:
			return nil, fmt.Errorf("filter protocol %q: myelin knows tcp, udp, sctp, icmp, icmpv4, icmpv6 (no L7 protocols)", p)
		}
	}
	return out, nil
}

// eventTypes maps Hubble's event type numbers to flow types: trace (4) is what Cilium
// calls its L3/L4 flows, l7 (129) carries DNS. Types myelin never produces (debug,
// capture, agent, ...) select nothing, as they would on a Cilium node without them.
func eventTypes(in []*flowpb.EventTypeFilter) ([]flow.Type, error) {
	var out []flow.Type
	for _, t := range in {
		if t.GetMatchSubType() {
			return nil, fmt.Errorf("filter event type %d:%d: myelin does not filter by sub-type: use --type without :subtype", t.GetType(), t.GetSubType())
		}
		switch t.GetType() {
		case eventDrop:
			out = append(out, flow.TypeDrop)
		case eventTrace:
			out = append(out, flow.TypeL3L4, flow.TypeTrace)
		case eventPolicyVerdict:
			out = append(out, flow.TypePolicyVerdict)
		case eventL7:
			out = append(out, flow.TypeDNS)
		default:
			out = append(out, flow.Type(fmt.Sprintf("CILIUM_EVENT_%d", t.GetType())))
		}
	}
	return out, nil
}
