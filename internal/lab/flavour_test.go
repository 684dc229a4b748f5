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
