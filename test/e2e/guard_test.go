package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestLabMyelinUserIPTablesGuard: with a user rule in node-1's iptables, the default
// guard (refuse) keeps BPF host routing off and names the chain; warn enables BPF and
// warns; off skips the check. A rule added later on node-2 raises a status warning and
// a Warning Event on its Node.
func TestLabMyelinUserIPTablesGuard(t *testing.T) {
	requireRoot(t)
	cs := labUp(t, "--nodes", "2", "--cni", "myelin", "--profile", "native")
	n1, n2 := labplan.NodeName(1), labplan.NodeName(2)
	if out, err := inNode(n1, "iptables", "-A", "INPUT", "-p", "tcp", "--dport", "9999", "-j", "ACCEPT"); err != nil {
		t.Fatalf("add a user rule: %v %s", err, out)
	}
	restartAgent(t, n1)
	expectHostRouting(t, n1, "Legacy", "user-defined firewall rules were found in filter/INPUT")
	if st := agentStatus(t, n1); st.Guard.Setting != "refuse" || len(st.Guard.Found) != 1 || st.Guard.Found[0] != "filter/INPUT" {
		t.Errorf("guard status %+v, want refuse with filter/INPUT", st.Guard)
	}

	createNodeConfig(t, "guard", map[string]string{"kubernetes.io/hostname": n1}, map[string]string{"user-iptables-guard": "warn"})
	restartAgent(t, n1)
	expectHostRouting(t, n1, "BPF", "every requirement")
	if st := agentStatus(t, n1); !strings.Contains(st.Guard.Warning, "bypasses the user-defined firewall rules in filter/INPUT") {
		t.Errorf("guard warn: status %+v, want a warning naming filter/INPUT", st.Guard)
	}
	deleteNodeConfig(t, "guard")
	createNodeConfig(t, "guard-off", map[string]string{"kubernetes.io/hostname": n1}, map[string]string{"user-iptables-guard": "off"})
	restartAgent(t, n1)
	expectHostRouting(t, n1, "BPF", "every requirement")
	if st := agentStatus(t, n1); st.Guard.Setting != "off" || len(st.Guard.Found) != 0 || st.Guard.Warning != "" {
		t.Errorf("guard off: status %+v, want nothing checked", st.Guard)
	}

	// node-2 runs BPF host routing; a rule appears there later.
	if out, err := inNode(n2, "nft", "add table inet user; add chain inet user in { type filter hook input priority 0 ; }; add rule inet user in tcp dport 9999 drop"); err != nil {
		t.Fatalf("add a user nft rule: %v %s", err, out)
	}
	eventually(t, 2*time.Minute, "warning about the new rule on node-2", func(ctx context.Context) (bool, string) {
		st := agentStatus(t, n2)
		evs, err := cs.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + n2 + ",reason=UserFirewallRules"})
		found := err == nil && len(evs.Items) > 0 && strings.Contains(evs.Items[0].Message, "inet user/in")
		return strings.Contains(st.Guard.Warning, "appeared in inet user/in") && found, fmt.Sprintf("status %+v, event found %v (%v)", st.Guard, found, err)
	})
	labDown(t)
}
