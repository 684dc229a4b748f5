// Package endpoint owns the pods' endpoints on a node: the record of each pod's
// attachment (kept on disk so a restarted agent adopts them), its entry in the BPF
// endpoints map, the TCX program on its host-side veth, and its /32 route. Every
// operation is idempotent, and Restore brings the datapath back in line with the
// records after an agent restart without touching the pods.
package endpoint
