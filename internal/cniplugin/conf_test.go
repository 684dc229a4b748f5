package cniplugin

import (
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseConf(t *testing.T) {
	tests := []struct {
		in, want string // want: "" = valid, else in the error's details
	}{
		{`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock"}`, ""},
		{`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni"}`, `"socket" is missing`},
		{`{"name":"myelin","socket":"run/agent.sock"}`, "must be an absolute path"},
		{`{not json`, "not valid JSON"},
	}
	for _, tt := range tests {
		_, err := parseConf([]byte(tt.in))
		if tt.want == "" {
			if err != nil {
				t.Errorf("parseConf(%s) = %v", tt.in, err)
			}
			continue
		}
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Details, tt.want) {
			t.Errorf("parseConf(%s) = %v, want code 7 with %q", tt.in, err, tt.want)
		}
	}
}

func TestParseK8sArgs(t *testing.T) {
	a, err := parseK8sArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u;OTHER=x")
	if err != nil || a.K8S_POD_NAMESPACE != "ns" || a.K8S_POD_NAME != "p" || a.K8S_POD_UID != "u" {
		t.Errorf("parseK8sArgs = %+v, %v", a, err)
	}
}
