package lab

import (
	"github.com/myelin-net/myelin/internal/lab/cni"
	"github.com/myelin-net/myelin/internal/lab/cni/bridge"
	"github.com/myelin-net/myelin/internal/lab/cni/flannel"
	"github.com/myelin-net/myelin/internal/lab/cni/myelin"
	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// FlavourOf returns what the lab runs for a CNI: the one place that maps --cni to a
// type. It returns nil for a CNI the lab doesn't know, which labplan.Options.Validate
// refuses before anything asks.
func FlavourOf(c labplan.CNI) cni.Flavour {
	switch c {
	case labplan.CNIMyelin:
		return myelin.Flavour{}
	case labplan.CNIBridge:
		return bridge.Flavour{}
	case labplan.CNIFlannel:
		return flannel.Flavour{}
	case labplan.CNINone:
		return cni.None{}
	}
	return nil
}
