package lab

import (
	"testing"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Every CNI the options accept has a flavour, and none other does.
func TestFlavourOfEveryValidCNI(t *testing.T) {
	for _, c := range []labplan.CNI{labplan.CNIMyelin, labplan.CNIBridge, labplan.CNIFlannel, "calico"} {
		o := labplan.DefaultOptions()
		o.CNI = c
		valid := o.Validate() == nil
		if got := FlavourOf(c) != nil; got != valid {
			t.Errorf("--cni %s: valid option %v, has a flavour %v", c, valid, got)
		}
	}
}

// Every runtime the options accept has a runtime type, and none other does.
func TestRuntimeOfEveryValidRuntime(t *testing.T) {
	for _, r := range []labplan.Runtime{labplan.RuntimeLab, labplan.RuntimeContainerd, "docker"} {
		o := labplan.DefaultOptions()
		o.Runtime = r
		valid := o.Validate() == nil
		if got := RuntimeOf(r) != nil; got != valid {
			t.Errorf("--runtime %s: valid option %v, has a runtime %v", r, valid, got)
		}
	}
}
