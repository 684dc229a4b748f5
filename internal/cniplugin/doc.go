// Package cniplugin is myelin-cni, the CNI plugin (spec 1.0.0 and 1.1.0: ADD, DEL,
// CHECK, VERSION, STATUS, GC). It is thin: it asks the node's agent for an address,
// builds the pod's veth (eth0 with a /32, a default route via a link-local gateway
// whose neighbour entry is fixed to the host-side veth's MAC, so the pod never ARPs),
// and registers the endpoint with the agent, which programs the datapath.
//
// Network configuration:
//
//	{"cniVersion": "1.1.0", "name": "myelin", "type": "myelin-cni",
//	 "socket": "/run/myelin/agent.sock"}
//
// Bad input (the configuration, CHECK's prevResult, the CNI_* variables, CNI_ARGS) gets
// a CNI error whose details name the input, what is wrong and what to do (conf.go,
// prevresult.go, env.go, podnetns.go; the table is in docs/operations.md, "The CNI
// plugin: its configuration and its errors"). CHECK compares the pod's network with
// its prevResult and the agent's endpoint (check.go). DEL succeeds whatever is
// already gone.
package cniplugin
