package cni

import (
	"context"
	"log/slog"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Flavour is one network plugin the lab can run.
type Flavour interface {
	// Tools are the binaries `lab up` needs for this CNI, checked before it changes
	// anything. self is the myelin binary.
	Tools(self string) []Tool
	// Processes are the per-node daemons the supervisor starts after the lab kubelets.
	Processes(p labplan.Plan, paths labplan.Paths, self string) []labplan.Process
	// Daemons names those daemons for `lab up`'s progress line, e.g. " with flanneld
	// (vxlan)"; "" when there are none.
	Daemons(p labplan.Plan) string
	// Bootstrap creates what the nodes need once etcd and the apiserver are ready and
	// before any node daemon starts. A restarted supervisor runs it again, so it must
	// be idempotent.
	Bootstrap(ctx context.Context, c Cluster) error
	// NodeNetwork installs the node's CNI configuration and keeps it current until ctx
	// ends. Each lab kubelet runs it in its node's netns (on --runtime containerd,
	// `myelin lab node-network` does, for flavours with reference plugins); a CNI that
	// installs its own configuration (as myelin-agent does) returns at once.
	NodeNetwork(ctx context.Context, n Node)
}

// Tool is a binary a flavour needs, and how to get it.
type Tool struct {
	Path string // a name looked up in $PATH, or an absolute path
	Fix  string // what the user runs to install it
}

// Cluster is what a flavour's bootstrap may use: the plan, the lab directory (its
// certificates) and the administrator's clients of the lab's apiserver.
type Cluster struct {
	Plan    labplan.Plan
	Paths   labplan.Paths
	Kube    kubernetes.Interface
	Dynamic dynamic.Interface
}

// Node is what a flavour's node network may use on one lab node.
type Node struct {
	Plan  labplan.Plan
	Paths labplan.Paths
	Node  labplan.Node
	// Admin is the lab administrator's client: a network DaemonSet has its own
	// ServiceAccount, and the node's identity may not list other Nodes.
	Admin kubernetes.Interface
	Log   *slog.Logger
}
