// Package lab is the lifecycle of a lab: a real multi-node Kubernetes cluster on one
// Linux machine out of network namespaces, with a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kube-scheduler) run as supervised children.
//
// It applies what package labplan computes: Up checks the machine (preflight), runs
// the plan's network steps, writes the PKI and kubeconfigs and starts the supervisor;
// the supervisor starts the processes, bootstraps the cluster and restarts what exits;
// Down removes everything by name ("myelin-" prefix) even after a crash. What one CNI
// needs (tools, node daemons, bootstrap, node network) comes from its flavour
// (package cni and its sub-packages), chosen in one place: FlavourOf.
//
// What runs each node's pods is its runtime (Runtime, chosen in RuntimeOf): the lab
// kubelet (sub-package kubelet; --runtime lab, the default) or the real kubelet with
// containerd and runc (--runtime containerd), which runs the images of internal/images.
package lab
