// Package guard finds firewall rules on a node that neither myelin nor kube-proxy
// created. BPF host routing bypasses the node's netfilter hooks for pod traffic, so
// rules an operator wrote there would silently stop applying; the agent consults the
// guard before choosing BPF host routing (user-iptables-guard: refuse, warn, off) and
// keeps watching for rules that appear later. Parsing is pure; Scan runs the tools.
package guard
