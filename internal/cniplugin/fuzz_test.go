package cniplugin

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/types"
)

// confSeeds are network configurations as runtimes pass them (a plain one, one from
// a conflist with the runtime's additions and a prevResult, a GC's) and as careless
// operators write them.
var confSeeds = []string{
	`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock"}`,
	`{"cniVersion":"1.0.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock",
	  "runtimeConfig":{"portMappings":[{"hostPort":8080,"containerPort":80,"protocol":"tcp"}]},
	  "capabilities":{"portMappings":true},
	  "prevResult":{"cniVersion":"1.0.0",
	    "interfaces":[{"name":"myl0123456789a","mac":"aa:bb:cc:dd:ee:01"},{"name":"eth0","mac":"aa:bb:cc:dd:ee:02","sandbox":"/var/run/netns/cni-1234"}],
	    "ips":[{"interface":1,"address":"10.244.1.7/32","gateway":"169.254.1.1"}],
	    "routes":[{"dst":"0.0.0.0/0","gw":"169.254.1.1"}],"dns":{}}}`,
	`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock",
	  "cni.dev/valid-attachments":[{"containerID":"c1","ifname":"eth0"}],"cni.dev/attachments":[{"containerID":"c1","ifname":"eth0"}]}`,
	`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","sockt":"/run/myelin/agent.sock"}`,
	`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","Socket":"/run/myelin/agent.sock"}`,
	`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":1}`,
	`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock","prevResult":"none"}`,
	`{"cniVersion":"1.1.0","name":"myelin","socket":"/run/myelin/agent.sock","cni.dev/valid-attachments":[{"containerID":7}]}`,
	`{"cniVersion":"0.1.0","name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock"}`,
	`{"cniVersion":"9.9.9","type":"myelin-cni","socket":"/run/myelin/agent.sock"}`,
	`{"cniVersion":1.1,"name":"myelin","type":"myelin-cni","socket":"/run/myelin/agent.sock"}`,
	`{"name":"myelin","type":"myelin-cni","socket":"run/myelin/agent.sock","mtu":"1500"}`,
	`{"name":"myelin","socket":"/run/myelin/` + strings.Repeat("x", 200) + `.sock"}`,
	`{"name":"myelin","socket":"/run/myelin\u0000/agent.sock"}`,
	`["myelin"]`, `null`, `{`, ``,
}

// parseConf never panics; it accepts a configuration that keeps its own rules and
// reads back the same when written again, or gives a CNI error that names the key at
// fault (or says the input is not JSON), kept short however large the input.
func FuzzParseConf(f *testing.F) {
	for _, s := range confSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		c, err := parseConf(in)
		if err != nil {
			ce := checkCNIError(t, err)
			switch {
			case !json.Valid(in):
				if ce.Code != types.ErrDecodingFailure || !strings.Contains(ce.Details, "not valid JSON") {
					t.Fatalf("parseConf(%q) = %v, want code 6 saying it is not JSON", in, ce)
				}
			case ce.Code != types.ErrInvalidNetworkConfig:
				t.Fatalf("parseConf(%q) = %v, want code 7", in, ce)
			case strings.Contains(ce.Details, `"socket" is missing`), strings.HasPrefix(ce.Details, "the configuration is a JSON "):
			case !namesKeyOf(ce.Details, in):
				t.Fatalf("parseConf(%q) = %v: names no key of the input", in, ce)
			}
			return
		}
		if !strings.HasPrefix(c.Socket, "/") || strings.ContainsRune(c.Socket, 0) || len(c.Socket) > maxSocketPath {
			t.Fatalf("parseConf(%q) accepted socket %q", in, c.Socket)
		}
		again, err := json.Marshal(map[string]string{"cniVersion": c.CNIVersion, "name": c.Name, "type": c.Type, "socket": c.Socket})
		if err != nil {
			t.Fatal(err)
		}
		c2, err := parseConf(again)
		if err != nil || c2.Socket != c.Socket || c2.Name != c.Name || c2.CNIVersion != c.CNIVersion || c2.Type != c.Type {
			t.Fatalf("parseConf(%q) = %+v, but its own fields %s read back as %+v, %v", in, c, again, c2, err)
		}
	})
}

// namesKeyOf reports whether details quotes a key of the JSON in, alone or as the
// end or start of a path such as "cni.dev/valid-attachments.containerID" (Go's
// decoder matches keys without regard to case: "soCket" is "socket").
func namesKeyOf(details string, in []byte) bool {
	var v any
	if json.Unmarshal(in, &v) != nil {
		return false
	}
	keys := map[string]bool{}
	collectKeys(v, keys)
	details = strings.ToLower(details)
	for k := range keys {
		if strings.Contains(details, `"`+k+`"`) || strings.Contains(details, "."+k+`"`) || strings.Contains(details, `"`+k+".") {
			return true
		}
	}
	return false
}

// collectKeys adds the keys of every object in v, lower case, to keys.
func collectKeys(v any, keys map[string]bool) {
	switch v := v.(type) {
	case map[string]any:
		for k, e := range v {
			keys[strings.ToLower(k)] = true
			collectKeys(e, keys)
		}
	case []any:
		for _, e := range v {
			collectKeys(e, keys)
		}
	}
}

// parseK8sArgs never panics; what it accepts reads back the same when written again,
// and an error names CNI_ARGS and is short however long the input.
func FuzzParseK8sArgs(f *testing.F) {
	for _, s := range []string{
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_INFRA_CONTAINER_ID=x",
		"IgnoreUnknown=1;K8S_POD_NAMESPACE=kube-system;K8S_POD_NAME=coredns-5d78c9869d-abcde;K8S_POD_INFRA_CONTAINER_ID=0123abcd;K8S_POD_UID=2f4c7c1e-8b1a-4f7e-9a51-3c1d2e4f5a6b",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p",
		"", "IgnoreUnknown=1", "K8S_POD_NAME=p;OTHER=x", "IgnoreUnknown=true;OTHER=x", "IgnoreUnknown=yes",
		"K8S_POD_NAME=a=b", "K8S_POD_NAME", ";", "K8S_POD_NAMESPACE=ns;", "CommonArgs=1", "IgnoreUnknown=1;=x",
		"K8S_POD_NAMESPACE=ns;K8S_POD_NAME=p;K8S_POD_NAME=q",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, in string) {
		a, err := parseK8sArgs(in)
		if err != nil {
			ce := checkCNIError(t, err)
			if ce.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Details, "CNI_ARGS") {
				t.Fatalf("parseK8sArgs(%q) = %v, want code 4 naming CNI_ARGS", in, ce)
			}
			return
		}
		fields := []string{string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME), string(a.K8S_POD_INFRA_CONTAINER_ID), string(a.K8S_POD_UID)}
		for _, v := range fields {
			if strings.ContainsAny(v, ";=") {
				t.Fatalf("parseK8sArgs(%q) = %+v: a value holds a separator", in, a)
			}
		}
		again := "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + fields[0] + ";K8S_POD_NAME=" + fields[1] +
			";K8S_POD_INFRA_CONTAINER_ID=" + fields[2] + ";K8S_POD_UID=" + fields[3]
		a2, err := parseK8sArgs(again)
		a.IgnoreUnknown = true
		if err != nil || a2 != a {
			t.Fatalf("parseK8sArgs(%q) = %+v, but written again (%q) it reads %+v, %v", in, a, again, a2, err)
		}
		if err := checkPodIdentity(a); err != nil {
			ce := checkCNIError(t, err)
			if ce.Code != types.ErrInvalidEnvironmentVariables || !strings.Contains(ce.Details, "K8S_POD_") {
				t.Fatalf("checkPodIdentity(%+v) = %v, want code 4 naming the key", a, ce)
			}
		} else if (a.K8S_POD_NAMESPACE == "") != (a.K8S_POD_NAME == "") {
			t.Fatalf("checkPodIdentity(%+v) accepted a namespace without a name or the reverse", a)
		}
	})
}

// checkCNIError checks that err is a CNI error a runtime can show: a code, a message,
// details of bounded size, and the same again after the JSON the plugin prints.
func checkCNIError(t *testing.T, err error) *types.Error {
	t.Helper()
	var ce *types.Error
	if !errors.As(err, &ce) {
		t.Fatalf("%v (%T) is no CNI error", err, err)
	}
	if ce.Code == 0 || ce.Msg == "" || ce.Details == "" || len(ce.Details) > 2048 {
		t.Fatalf("CNI error %+v: want a code, a message and details of at most 2 KiB", ce)
	}
	b, jerr := json.Marshal(ce)
	var back map[string]any
	if jerr != nil || json.Unmarshal(b, &back) != nil || back["code"] != float64(ce.Code) || back["msg"] != ce.Msg || back["details"] == nil {
		t.Fatalf("CNI error %+v printed as %s (%v)", ce, b, jerr)
	}
	return ce
}
