// Package ipam allocates pod IPs from a node's PodCIDR. The Allocator is pure (no I/O)
// and the Pool adds a disk store behind it, so allocations survive an agent restart.
package ipam
