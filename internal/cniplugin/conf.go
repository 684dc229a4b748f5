package cniplugin

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
)

// NetConf is myelin-cni's network configuration.
type NetConf struct {
	types.PluginConf
	// Socket is the agent's API socket on this node.
	Socket string `json:"socket"`
}

// k8sArgs are the CNI_ARGS a Kubernetes runtime passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI's names
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

func invalidConf(format string, a ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid myelin-cni network configuration", fmt.Sprintf(format, a...))
}

// parseConf reads and checks the network configuration from stdin.
func parseConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, invalidConf("the configuration is not valid JSON: %v", err)
	}
	if c.Socket == "" {
		return nil, invalidConf(`network %q: "socket" is missing; set it to the myelin agent's socket (default /run/myelin/agent.sock)`, c.Name)
	}
	if !strings.HasPrefix(c.Socket, "/") {
		return nil, invalidConf(`network %q: "socket" %q must be an absolute path`, c.Name, c.Socket)
	}
	return &c, nil
}

// parseK8sArgs reads the pod identity from CNI_ARGS; outside Kubernetes they are empty.
func parseK8sArgs(args string) (k8sArgs, error) {
	var a k8sArgs
	if err := types.LoadArgs(args, &a); err != nil {
		return a, types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS", err.Error())
	}
	return a, nil
}
