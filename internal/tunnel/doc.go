// Package tunnel owns VXLAN tunnel mode on a node: the collect-metadata VXLAN device
// (myelin_vxlan), the desired PodCIDR → node tunnel table (pure), and the kernel routes
// that send the node's own traffic for remote pods into the tunnel (lightweight-tunnel
// "encap ip" routes, which legacy host routing uses for pods as well).
package tunnel
