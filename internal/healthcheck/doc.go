// Package healthcheck serves the healthCheckNodePort of every externalTrafficPolicy:
// Local LoadBalancer Service on this node, as kube-proxy does when myelin replaces it:
// HTTP on every node address, 200 with the node's ready local endpoint count when it
// has some, 503 otherwise. The Service watcher (package service) computes what each
// port answers; this package owns the listeners.
package healthcheck
