package cni

import (
	"context"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// None is --cni none: no CNI at all. The nodes register and stay NotReady until a
// CNI is installed (e.g. myelin by its Helm chart, into the nodes' CNI dirs).
type None struct{}

var _ Flavour = None{}

// Tools: none.
func (None) Tools(string) []Tool { return nil }

// Processes: none.
func (None) Processes(labplan.Plan, labplan.Paths, string) []labplan.Process { return nil }

// Daemons names the missing CNI for `lab up`'s progress line.
func (None) Daemons(labplan.Plan) string { return " and no CNI (--cni none)" }

// Bootstrap does nothing.
func (None) Bootstrap(context.Context, Cluster) error { return nil }

// NodeNetwork does nothing.
func (None) NodeNetwork(context.Context, Node) {}
