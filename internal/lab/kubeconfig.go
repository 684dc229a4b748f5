package lab

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// writeKubeconfigs writes the admin kubeconfig and one per component and node identity.
func writeKubeconfigs(paths labplan.Paths, plan labplan.Plan) error {
	server := fmt.Sprintf("https://%s:%d", plan.Addressing.ControlPlaneIP(), labplan.APIServerPort)
	if err := os.MkdirAll(filepath.Dir(paths.ComponentKubeconfig("x")), 0o700); err != nil {
		return err
	}
	for _, id := range identities(plan) {
		path := paths.ComponentKubeconfig(id.file)
		if id.file == "admin" {
			path = paths.Kubeconfig()
		}
		if err := os.WriteFile(path, []byte(kubeconfig(paths.PKI(), server, id.file)), 0o600); err != nil {
			return err
		}
	}
	return nil
}

func kubeconfig(pki, server, id string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: myelin-lab
  cluster:
    server: %[2]s
    certificate-authority: %[1]s/ca.crt
users:
- name: %[3]s
  user:
    client-certificate: %[1]s/%[3]s.crt
    client-key: %[1]s/%[3]s.key
contexts:
- name: myelin-lab
  context:
    cluster: myelin-lab
    user: %[3]s
current-context: myelin-lab
`, pki, server, id)
}
