// Package kubelet is the lab's stand-in for kubelet plus a container runtime, one per
// lab node, running in the node's network namespace. It registers its Node and keeps it
// Ready, realises the Pods the scheduler binds to the node (a network namespace, a CNI
// ADD through libcni with the arguments containerd passes, the first container's command
// run from the host inside that namespace), reports Pod status, restarts crashed
// commands with backoff, and on deletion stops the command, calls CNI DEL and removes the
// namespace. There are no images: a Pod's command is a program of the host. The node's
// CNI configuration comes from the lab's CNI flavour (cni.Flavour.NodeNetwork), which
// each kubelet runs alongside its Pods.
package kubelet
