package cniplugin

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

func TestParseConf(t *testing.T) {
	tests := []struct {
		in   string
		code uint   // 0: valid
		want string // in the error's details
	}{
		{`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock"}`, 0, ""},
		{`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni"}`, 7, `"socket" is missing`},
		{`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","sockt":"/run/myelin/agent.sock","runtimeConfig":{}}`, 7,
			`"socket" is missing (keys myelin-cni does not know: "sockt")`},
		{`{"name":"myelin","socket":"run/agent.sock"}`, 7, "must be an absolute path"},
		{`{not json`, 6, "not valid JSON"},
		{`{"name":"myelin","socket":5}`, 7, `"socket" is a JSON number, it must be a string`},
		{`{"name":"myelin","socket":"/a","prevResult":"x"}`, 7, `"prevResult" is a JSON string, it must be an object`},
		{`["myelin"]`, 7, "the configuration is a JSON array, it must be an object"},
		// Keys other plugins take are refused, not silently without effect.
		{`{"name":"myelin","socket":"/a","mtu":1400}`, 7, `myelin-cni takes no "mtu" (here "1400")`},
		{`{"name":"myelin","socket":"/a","mtu":"big"}`, 7, `myelin-cni takes no "mtu"`},
		{`{"name":"myelin","socket":"/a","ipam":{"type":"host-local","subnet":"10.1.0.0/16"}}`, 7, `myelin-cni takes no "ipam" (here type "host-local")`},
		{`{"name":"myelin","socket":"/a","IPAM":{"subnet":"10.1.0.0/16"}}`, 7, `myelin-cni takes no "ipam" (here without a type)`},
		// The agent could never listen there: not "try again later" (code 11) for ever.
		{`{"name":"myelin","socket":"/run/myelin\u0000/agent.sock"}`, 7, "contains a NUL character"},
		{`{"name":"myelin","socket":"/run/myelin/` + strings.Repeat("x", 100) + `.sock"}`, 7, "a unix socket's path holds at most 107"},
	}
	for _, tt := range tests {
		_, err := parseConf([]byte(tt.in))
		if tt.code == 0 {
			if err != nil {
				t.Errorf("parseConf(%s) = %v", tt.in, err)
			}
			continue
		}
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != tt.code || !strings.Contains(ce.Details, tt.want) || !strings.Contains(ce.Details, "05-myelin.conflist") {
			t.Errorf("parseConf(%s) = %v, want code %d with %q and what to correct", tt.in, err, tt.code, tt.want)
		}
	}
}

// A huge value is cut in the error, which the runtime logs and shows on the pod.
func TestParseConfHugeValueShortError(t *testing.T) {
	_, err := parseConf([]byte(`{"name":"myelin","socket":"` + strings.Repeat("x", 1<<20) + `"}`))
	var ce *types.Error
	if !errors.As(err, &ce) || len(ce.Details) > 1024 || !strings.Contains(ce.Details, "(1048576 bytes)") {
		t.Errorf("parseConf with a 1 MiB relative socket: %d bytes of details, want at most 1 KiB naming the size", len(ce.Details))
	}
}

func TestParseK8sArgs(t *testing.T) {
	a, err := parseK8sArgs("IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=abc;K8S_POD_UID=u;OTHER=x")
	if err != nil || a.K8S_POD_NAMESPACE != "ns" || a.K8S_POD_NAME != "p" || a.K8S_POD_UID != "u" {
		t.Errorf("parseK8sArgs = %+v, %v", a, err)
	}
	_, err = parseK8sArgs("K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;OTHER=x")
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Details, "IgnoreUnknown=1") {
		t.Errorf("parseK8sArgs with an unknown key and no IgnoreUnknown = %v, want code 4 saying IgnoreUnknown=1", err)
	}
}

// ADD records a pod by namespace and name: both, or outside Kubernetes neither.
func TestCheckPodIdentity(t *testing.T) {
	for _, tt := range []struct {
		args string
		want string // "" = accepted
	}{
		{"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p", ""},
		{"", ""},
		{"IgnoreUnknown=1;K8S_POD_NAME=p", "has K8S_POD_NAME but no K8S_POD_NAMESPACE"},
		{"IgnoreUnknown=1;K8S_POD_NAMESPACE=ns", "has K8S_POD_NAMESPACE but no K8S_POD_NAME"},
	} {
		a, err := parseK8sArgs(tt.args)
		if err == nil {
			err = checkPodIdentity(a)
		}
		var ce *types.Error
		if (tt.want == "") != (err == nil) || err != nil && (!errors.As(err, &ce) || !strings.Contains(ce.Details, tt.want)) {
			t.Errorf("CNI_ARGS %q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

// The pod's identity in CNI_ARGS must be names, as the agent checks: a value with a
// newline or longer than Kubernetes allows is refused with an error naming the key.
func TestCheckPodNames(t *testing.T) {
	for _, tt := range []struct {
		args string
		want string // "" = accepted
	}{
		{"K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde;K8S_POD_UID=2f4c7c1e-8b1a-4f7e-9a51-3c1d2e4f5a6b", ""},
		{"", ""},
		{"K8S_POD_NAMESPACE=ns\nx;K8S_POD_NAME=p", "K8S_POD_NAMESPACE"},
		{"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p\nlevel=ERROR", "K8S_POD_NAME"},
		{"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=" + strings.Repeat("p", 254), "K8S_POD_NAME"},
		{"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_UID=a b", "K8S_POD_UID"},
	} {
		a, err := parseK8sArgs(tt.args)
		if err == nil {
			err = checkPodNames(a)
		}
		var ce *types.Error
		if (tt.want == "") != (err == nil) || err != nil && (!errors.As(err, &ce) || !strings.Contains(ce.Details, tt.want) || len(ce.Details) > 1024) {
			t.Errorf("CNI_ARGS %.80q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

// GC keeps the attachments the runtime lists and removes every other endpoint: a GC
// without the list is refused, an empty or null list keeps nothing.
func TestGCKeep(t *testing.T) {
	const conf = `{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock"`
	for _, tt := range []struct {
		extra string
		keep  []string // nil: refused
	}{
		{``, nil},
		{`,"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]`, nil},
		{`,"cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"},{"containerID":"c2","ifname":"eth0"}]`, []string{"c1", "c2"}},
		{`,"cni.dev/valid-attachments":[]`, []string{}},
		{`,"cni.dev/valid-attachments":null`, []string{}},
	} {
		in := []byte(conf + tt.extra + "}")
		c, err := parseConf(in)
		if err != nil {
			t.Fatal(err)
		}
		keep, err := gcKeep(in, c)
		var ce *types.Error
		switch {
		case tt.keep == nil && (!errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || !strings.Contains(ce.Details, `"cni.dev/valid-attachments"`)):
			t.Errorf("GC with %s: %v, %v; want code 7 naming cni.dev/valid-attachments", in, keep, err)
		case tt.keep != nil && (err != nil || keep == nil || !slices.Equal(keep, tt.keep)):
			t.Errorf("GC with %s: %v, %v; want keep %q", in, keep, err, tt.keep)
		}
	}
}
