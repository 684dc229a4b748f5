// Package lab builds a real multi-node Kubernetes cluster on one Linux machine out of
// network namespaces: the underlay (bridges and a router in myelin-lab-net), an external
// host (myelin-lab-ext), one namespace per node, and a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) run as supervised children.
//
// The package keeps decisions apart from effects: Options and Plan are pure values
// (validated and computed without root), and the functions that apply them (Up, Down,
// the supervisor) shell out to iproute2 and start processes. Every name the lab creates
// carries the "myelin-" prefix so that Down can find leftovers after a crash.
//
// The lab kubelet that realises Pods on each node lives in the sub-package kubelet.
package lab
