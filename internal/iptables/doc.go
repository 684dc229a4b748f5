// Package iptables owns the rules myelin keeps in the node's iptables: the filter
// chain MYELIN-FORWARD that accepts forwarded pod traffic under legacy host routing,
// and the nat chain MYELIN-POSTROUTING that masquerades pod traffic leaving the
// cluster when masquerade is done by iptables rather than BPF. Each chain is
// installed idempotently with one jump to it, and removed with its jump.
package iptables
