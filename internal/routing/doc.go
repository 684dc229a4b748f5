// Package routing owns the node's kernel routes that myelin installs: a /32 route per
// local pod to its host-side veth, and (with auto-direct-node-routes) a route per other
// node's PodCIDR via that node's IP. A Node's PodCIDR and IP are not trusted: Peers
// refuses the Nodes whose would steal or loop other pods' traffic, for these routes
// and for tunnel mode alike. Desired routes are computed by pure functions; the
// Kernel type applies them with netlink and marks them with myelin's route protocols so
// a restarted agent finds and reconciles its own routes and never touches others.
package routing
