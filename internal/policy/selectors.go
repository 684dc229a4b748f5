package policy

import (
	"fmt"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// compiled is what a computation (or a Tracer) derives from the policies once,
// before matching them against pods and identities: their ipBlocks (cidrSet)
// and their label selectors (selectorSet).
type compiled struct {
	cidrs     *cidrSet
	selectors selectorSet
}

func compile(nps []*networkingv1.NetworkPolicy) *compiled {
	return &compiled{cidrs: newCIDRSet(nps), selectors: newSelectorSet(nps)}
}

// selectorSet holds the policies' selectors with matchExpressions, parsed once.
// Parsing (which validates again what the API validated) is what a match of such
// a selector costs, and a computation matches each peer selector against every
// identity: a tenant's policy of 2,000 such peers took 11 s per computation with
// one of its pods on the node, 33 s with three (BenchmarkComputeExpressionPeers),
// longer than CNI ADD waits for one. matchLabels-only selectors need no parsing
// and are not held. Read-only once built: a Tracer shares it between goroutines.
type selectorSet map[*metav1.LabelSelector]parsedSelector

type parsedSelector struct {
	sel labels.Selector
	err error
}

func parseSelector(sel *metav1.LabelSelector) parsedSelector {
	p, err := metav1.LabelSelectorAsSelector(sel)
	if err != nil {
		err = fmt.Errorf("parse label selector: %w", err)
	}
	return parsedSelector{sel: p, err: err}
}

func newSelectorSet(nps []*networkingv1.NetworkPolicy) selectorSet {
	s := selectorSet{}
	add := func(sel *metav1.LabelSelector) {
		if sel == nil || len(sel.MatchExpressions) == 0 {
			return
		}
		if _, ok := s[sel]; !ok {
			s[sel] = parseSelector(sel)
		}
	}
	peers := func(pps []networkingv1.NetworkPolicyPeer) {
		for i := range pps {
			add(pps[i].PodSelector)
			add(pps[i].NamespaceSelector)
		}
	}
	for _, np := range nps {
		add(&np.Spec.PodSelector)
		for i := range np.Spec.Ingress {
			peers(np.Spec.Ingress[i].From)
		}
		for i := range np.Spec.Egress {
			peers(np.Spec.Egress[i].To)
		}
	}
	return s
}

// matches says whether sel (nil: nothing) matches set.
func (s selectorSet) matches(sel *metav1.LabelSelector, set map[string]string) (bool, error) {
	if sel == nil {
		return false, nil
	}
	if len(sel.MatchExpressions) == 0 {
		// matchLabels only, as most selectors are: a map lookup per label. The
		// API validated the selector's and the pods' labels already; parsing
		// (which validates again) was 3/4 of a computation's time.
		for k, v := range sel.MatchLabels {
			if got, ok := set[k]; !ok || got != v {
				return false, nil
			}
		}
		return true, nil
	}
	p, ok := s[sel]
	if !ok { // not one of the policies' own selectors
		p = parseSelector(sel)
	}
	if p.err != nil {
		return false, p.err
	}
	return p.sel.Matches(labels.Set(set)), nil
}
