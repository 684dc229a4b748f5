package cniplugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runPlugin runs the plugin as the runtime does (skel reads CNI_* and stdin) with env
// over a valid ADD's and stdin, and returns the error JSON it would print.
func runPlugin(t *testing.T, env map[string]string, stdin string) map[string]any {
	t.Helper()
	base := map[string]string{"CNI_COMMAND": "ADD", "CNI_CONTAINERID": "ctr-proto", "CNI_NETNS": "/var/run/netns/cni-none",
		"CNI_IFNAME": "eth0", "CNI_PATH": "/opt/cni/bin", "CNI_ARGS": "", "CNI_NETNS_OVERRIDE": ""}
	for k, v := range env {
		base[k] = v
	}
	for k, v := range base {
		t.Setenv(k, v)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = w.WriteString(stdin); w.Close() }()
	defer r.Close()
	saved := os.Stdin
	os.Stdin = r
	defer func() { os.Stdin = saved }()
	e := run()
	if e == nil {
		return nil
	}
	b, err := json.Marshal(e)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// Every bad input a runtime or an operator can give gets the spec's error JSON: a
// code, a message, and details naming the input and what to do.
func TestPluginErrorsNameTheInput(t *testing.T) {
	dir := t.TempDir()
	leftover := filepath.Join(dir, "cni-leftover")
	if err := os.WriteFile(leftover, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(dir, "agent.sock") // no agent
	conf := func(version string) string {
		return fmt.Sprintf(`{"cniVersion":%q,"name":"myelin","type":"myelin-cni","socket":%q}`, version, socket)
	}
	for _, c := range []struct {
		name  string
		env   map[string]string
		stdin string
		code  float64
		want  string // in details
	}{
		{"unknown command", map[string]string{"CNI_COMMAND": "ADDD"}, conf("1.1.0"), 4, `CNI_COMMAND "ADDD" is none of`},
		{"no ifname", map[string]string{"CNI_IFNAME": ""}, conf("1.1.0"), 4, "ADD needs CNI_IFNAME"},
		{"no container id", map[string]string{"CNI_COMMAND": "DEL", "CNI_CONTAINERID": ""}, conf("1.1.0"), 4, "DEL needs CNI_CONTAINERID"},
		{"no netns", map[string]string{"CNI_NETNS": ""}, conf("1.1.0"), 4, "ADD needs CNI_NETNS"},
		{"long ifname", map[string]string{"CNI_IFNAME": "eth0123456789abc"}, conf("1.1.0"), 4, `CNI_IFNAME "eth0123456789abc": interface name is too long`},
		{"ifname with /", map[string]string{"CNI_IFNAME": "eth/0"}, conf("1.1.0"), 4, `CNI_IFNAME "eth/0"`},
		{"bad container id", map[string]string{"CNI_CONTAINERID": "ctr 1"}, conf("1.1.0"), 4, `CNI_CONTAINERID "ctr 1"`},
		{"cniVersion 0.1.0", nil, conf("0.1.0"), 1, `set "cniVersion"`},
		{"cniVersion 9.9.9", nil, conf("9.9.9"), 1, `config is "9.9.9"`},
		{"no cniVersion", nil, fmt.Sprintf(`{"name":"myelin","socket":%q}`, socket), 1, `set "cniVersion"`},
		{"STATUS at 1.0.0", map[string]string{"CNI_COMMAND": "STATUS"}, conf("1.0.0"), 1, "GC and STATUS 1.1.0"},
		{"no name", nil, fmt.Sprintf(`{"cniVersion":"1.1.0","socket":%q}`, socket), 7, "05-myelin.conflist"},
		{"not JSON", nil, `{"cniVersion":"1.1.0",`, 6, "05-myelin.conflist"},
		{"relative socket", nil, `{"cniVersion":"1.1.0","name":"myelin","socket":"agent.sock"}`, 7, `"socket" "agent.sock" must be an absolute path`},
		{"netns a leftover file", map[string]string{"CNI_NETNS": leftover}, conf("1.1.0"), 8, leftover},
	} {
		t.Run(c.name, func(t *testing.T) {
			out := runPlugin(t, c.env, c.stdin)
			details, _ := out["details"].(string)
			if out == nil || out["code"] != c.code || out["msg"] == "" || !strings.Contains(details, c.want) {
				t.Errorf("error JSON %v, want code %v with details saying %q", out, c.code, c.want)
			}
		})
	}
}

// DEL of a pod whose netns is gone succeeds through skel too (it checks CNI_NETNS
// after DEL), with the agent down: the delete is left for the agent.
func TestPluginDelNetNSGone(t *testing.T) {
	socket := filepath.Join(t.TempDir(), "agent.sock")
	env := map[string]string{"CNI_COMMAND": "DEL", "CNI_NETNS": "/var/run/netns/cni-myelin-test-gone"}
	for _, netns := range []string{env["CNI_NETNS"], ""} {
		env["CNI_NETNS"] = netns
		if out := runPlugin(t, env, fmt.Sprintf(`{"cniVersion":"1.0.0","name":"myelin","type":"myelin-cni","socket":%q}`, socket)); out != nil {
			t.Errorf("DEL with CNI_NETNS %q gone: %v, want success", netns, out)
		}
	}
}
