package agent

import (
	"context"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// The API serves a part only once its view is registered: before, /v1/services and
// /v1/config answer "starting" and status leaves the part's fields out; after, they
// answer from the view, and a view registered later refines what an earlier one set.
func TestServerServesRegisteredViews(t *testing.T) {
	a, _ := serveTest(t)
	c, ctx := api.NewClient(a.cfg.socket()), context.Background()

	if _, err := c.Services(ctx); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Errorf("services before any view = %v, want a starting error", err)
	}
	if _, err := c.Config(ctx); err == nil || !strings.Contains(err.Error(), "starting") {
		t.Errorf("config before any view = %v, want a starting error", err)
	}
	if st, err := c.Status(ctx); err != nil || st.Node != "n1" || st.KubeProxy != "" || st.Loops != nil {
		t.Errorf("status before any view = %+v, %v; want only the node's endpoints and IPAM", st, err)
	}

	plan := nodePlan{Node: "n1", KubeProxyReplacement: true}
	a.views.add(nodeView{node: "n1", plan: plan}, newLoops())
	if st, err := c.Status(ctx); err != nil || st.KubeProxy != "myelin (starting)" || !st.Kubernetes.Connected {
		t.Errorf("status with the plan = %+v, %v; want kube-proxy myelin (starting), connected", st, err)
	}
	if cv, err := c.Config(ctx); err != nil || cv.Node != "n1" {
		t.Errorf("config with the plan = %+v, %v", cv, err)
	}
	a.views.add(kubeProxyServices{node: "n1"})
	if svcs, err := c.Services(ctx); err != nil || svcs.ServedBy != "kube-proxy" || svcs.Node != "n1" {
		t.Errorf("services with kube-proxy's view = %+v, %v", svcs, err)
	}
	if st, err := c.Status(ctx); err != nil || st.KubeProxy != "kube-proxy (kube-proxy-replacement is false)" {
		t.Errorf("status with kube-proxy's view: kube-proxy %q, %v", st.KubeProxy, err)
	}
}
