package install

import (
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func daemonSet(t *testing.T, sets ...string) appsv1.DaemonSet {
	t.Helper()
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objects(t, template(t, sets...)), "DaemonSet", "myelin").Object, &ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

func arg(c corev1.Container, flag string) string {
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

// On a real node the agent uses the default paths; in the lab every node-local path
// carries the node's name, from the downward API.
func TestChartNodePaths(t *testing.T) {
	for _, c := range []struct {
		name string
		sets []string
		want map[string]string
	}{
		{"real node", nil, map[string]string{"--state-dir": "/run/myelin", "--bpffs-dir": "/sys/fs/bpf/myelin",
			"--cni-bin-dir": "/opt/cni/bin", "--cni-conf-dir": "/etc/cni/net.d"}},
		{"lab", labSets, map[string]string{"--state-dir": "/run/myelin/$(NODE_NAME)", "--bpffs-dir": "/sys/fs/bpf/myelin/$(NODE_NAME)",
			"--cni-bin-dir": "/run/myelin-lab/cni/bin/$(NODE_NAME)", "--cni-conf-dir": "/run/myelin-lab/cni/net.d/$(NODE_NAME)"}},
	} {
		ds := daemonSet(t, c.sets...)
		agent := ds.Spec.Template.Spec.Containers[0]
		for flag, want := range c.want {
			if got := arg(agent, flag); got != want {
				t.Errorf("%s: agent %s = %q, want %q", c.name, flag, got, want)
			}
		}
		if got := arg(ds.Spec.Template.Spec.InitContainers[0], "--cni-bin-dir"); got != c.want["--cni-bin-dir"] {
			t.Errorf("%s: init container installs the plugin into %q, want %q", c.name, got, c.want["--cni-bin-dir"])
		}
		if env := agent.Env[0]; env.Name != "NODE_NAME" || env.ValueFrom == nil || env.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
			t.Errorf("%s: first env %+v, want NODE_NAME from spec.nodeName (args expand it)", c.name, env)
		}
	}
}

// The agent pod: host network, capabilities instead of privileged, probes on the
// health port, one node at a time on upgrade, the image from the values.
func TestChartAgentPod(t *testing.T) {
	ds := daemonSet(t, labSets...)
	spec := ds.Spec.Template.Spec
	agent := spec.Containers[0]
	if !spec.HostNetwork {
		t.Error("agent pod is not hostNetwork")
	}
	sc := agent.SecurityContext
	if sc == nil || (sc.Privileged != nil && *sc.Privileged) || sc.Capabilities == nil ||
		!slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || !slices.Contains(sc.Capabilities.Add, "BPF") {
		t.Errorf("agent securityContext %+v, want drop ALL and the listed capabilities", sc)
	}
	if p := agent.ReadinessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/readyz" || p.HTTPGet.Port.IntValue() != 9879 {
		t.Errorf("readiness probe %+v, want GET /readyz on 9879", p)
	}
	if p := agent.LivenessProbe; p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/healthz" {
		t.Errorf("liveness probe %+v, want GET /healthz", p)
	}
	if arg(agent, "--health-port") != "9879" || arg(agent, "--log-format") != "json" {
		t.Errorf("agent args %v, want --health-port=9879 --log-format=json", agent.Args)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("updateStrategy %+v, want RollingUpdate maxUnavailable 1", ds.Spec.UpdateStrategy)
	}
	if agent.Image != "myelin/agent:v0.0.0-test" || agent.ImagePullPolicy != corev1.PullNever {
		t.Errorf("image %s %s, want myelin/agent:v0.0.0-test Never (no registry host: never pulled)", agent.Image, agent.ImagePullPolicy)
	}
	envs := map[string]string{}
	for _, e := range agent.Env {
		envs[e.Name] = e.Value
	}
	if envs["KUBERNETES_SERVICE_HOST"] != "198.18.0.1" || envs["KUBERNETES_SERVICE_PORT"] != "6443" {
		t.Errorf("agent env %v, want the apiserver from k8sServiceHost/k8sServicePort", envs)
	}
	if ds := daemonSet(t); ds.Spec.Template.Spec.Containers[0].Image != "myelin/agent:dev" {
		t.Errorf("default image %s, want the chart's appVersion as tag", ds.Spec.Template.Spec.Containers[0].Image)
	}
}

// extraEnv reaches the agent container after the chart's own variables (NODE_NAME
// first: the args expand it); a name the chart sets itself is refused, naming it.
func TestChartExtraEnv(t *testing.T) {
	ds := daemonSet(t, "extraEnv[0].name=GODEBUG", "extraEnv[0].value=madvdontneed=1",
		"extraEnv[1].name=POD_NAME", "extraEnv[1].valueFrom.fieldRef.fieldPath=metadata.name")
	env := ds.Spec.Template.Spec.Containers[0].Env
	if len(env) < 4 || env[0].Name != "NODE_NAME" {
		t.Fatalf("agent env %+v, want NODE_NAME first and the two extra variables", env)
	}
	tail := env[len(env)-2:]
	if tail[0].Name != "GODEBUG" || tail[0].Value != "madvdontneed=1" ||
		tail[1].Name != "POD_NAME" || tail[1].ValueFrom == nil || tail[1].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("agent env ends with %+v, want GODEBUG=madvdontneed=1 and POD_NAME from metadata.name", tail)
	}
	for _, name := range []string{"NODE_NAME", "MYELIN_STATE_DIR", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT"} {
		out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system",
			"--set", "extraEnv[0].name="+name, "--set", "extraEnv[0].value=x")
		if err == nil || !strings.Contains(out, "extraEnv: the chart sets "+name+" itself") {
			t.Errorf("extraEnv %s: err %v, output %q; want a failure naming it", name, err, out)
		}
	}
	out, err := run(t, nil, helm(t), "template", "myelin", chartDir(), "--namespace", "kube-system", "--set", "extraEnv[0].value=x")
	if err == nil || !strings.Contains(out, "missing property 'name'") {
		t.Errorf("extraEnv without a name: err %v, output %q; want the schema to refuse it", err, out)
	}
}

// The runtime's netns directory reaches the agent with HostToContainer propagation at
// the path the runtime names in CNI_NETNS; "" leaves it out (nodes whose mounts are
// private, where the runtime would refuse the container), and so does cleanup mode.
// Socket-LB off keeps it: NetworkPolicy reads a pod's sockets there too.
func TestChartPodNetnsMount(t *testing.T) {
	for _, c := range []struct {
		name string
		sets []string
		want string // the mount's path, "" for none
	}{
		{"default", nil, "/run/netns"},
		{"another path", []string{"socketLB.netnsPath=/var/lib/netns"}, "/var/lib/netns"},
		{"left out", []string{"socketLB.netnsPath="}, ""},
		{"cleanup", []string{"cleanup=true"}, ""},
		{"socket-LB off", []string{"socketLB.enabled=false"}, "/run/netns"},
	} {
		ds := daemonSet(t, c.sets...)
		var got string
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == "pod-netns" && v.HostPath != nil {
				got = v.HostPath.Path
			}
		}
		var mount *corev1.VolumeMount
		for _, m := range ds.Spec.Template.Spec.Containers[0].VolumeMounts {
			if m.Name == "pod-netns" {
				mount = &m
			}
		}
		switch {
		case got != c.want:
			t.Errorf("%s: pod-netns volume %q, want %q", c.name, got, c.want)
		case c.want == "" && mount != nil:
			t.Errorf("%s: mount %+v without its volume", c.name, *mount)
		case c.want != "" && (mount == nil || mount.MountPath != c.want || mount.MountPropagation == nil ||
			*mount.MountPropagation != corev1.MountPropagationHostToContainer || !mount.ReadOnly):
			t.Errorf("%s: mount %+v, want %s read-only with HostToContainer", c.name, mount, c.want)
		}
	}
}
