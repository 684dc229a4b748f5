// Package connectivity is `myelin connectivity test`: it deploys its own namespace of
// client, server and host-network pods, runs a fixed list of scenarios (pod to pod on
// one node and across nodes, Services, host, outside, DNS, MTU and fragments,
// NetworkPolicy) by running `myelin connectivity probe` inside the pods, prints a
// result table with timings, and deletes the namespace. Pods run the myelin/test image
// on real clusters; on the lab runtime they run the host's myelin binary (the lab
// kubelet runs host programs), and probes enter the pods' network namespaces.
//
// The probe side (probe.go) is what runs inside a pod: one HTTP request, one DNS
// lookup, one ICMP echo with or without DF, one fragmented UDP exchange.
package connectivity
