// Command myelin-cni is the CNI plugin the container runtime executes for each pod.
// Installed by myelin-agent into the node's CNI bin dir; see internal/cniplugin.
package main

import "github.com/myelin-net/myelin/internal/cniplugin"

func main() { cniplugin.Main() }
