// Package cni is what a CNI flavour of the lab (--cni) must provide, and the few
// facts the flavours share. A flavour (sub-packages myelin, bridge and flannel) owns
// everything specific to one network plugin: the tools `lab up` checks for, the
// per-node daemons the supervisor runs, what it creates in the cluster at bootstrap,
// and how each lab kubelet gets the node's CNI configuration. The lifecycle (package
// lab) and the lab kubelet call a flavour only through the Flavour interface, so a new
// CNI (or runtime) is one new type registered in lab.FlavourOf.
package cni
