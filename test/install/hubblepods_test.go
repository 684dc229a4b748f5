package install

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
)

// deployment is the rendered Deployment name of objs.
func deployment(t *testing.T, objs []*unstructured.Unstructured, name string) appsv1.Deployment {
	t.Helper()
	var dep appsv1.Deployment
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(find(t, objs, "Deployment", name).Object, &dep); err != nil {
		t.Fatal(err)
	}
	return dep
}

// fileMode prints a volume's mode in octal ("unset" for none).
func fileMode(m *int32) string {
	if m == nil {
		return "unset"
	}
	return fmt.Sprintf("%#o", *m)
}

// podIDs are the user, group and fsGroup a pod's containers run with.
type podIDs struct{ uid, gid, fsGroup int64 }

// The relay and the UI run as the values' non-root user and group (numbers: the image
// names no user) with the runtime's seccomp filter, no privilege escalation, no
// capabilities and a read-only root with no writable volume (they write no file), and
// with hubble.tls.enabled read the Secret through the pod's fsGroup: the files are
// root's and fsGroup's, mode 0440 (checkTLSVolume), where they were 0444 and the key
// readable by every user of the pod. A user of 0 is refused at install.
func TestChartHubblePodsHardened(t *testing.T) {
	on := []string{"hubble.relay.enabled=true", "hubble.ui.enabled=true", "hubble.tls.enabled=true", "hubble.tls.secretName=my-hubble-tls"}
	nobody := podIDs{65534, 65534, 65534}
	for _, c := range []struct {
		sets      []string
		tls       bool
		relay, ui podIDs
	}{
		{on, true, nobody, nobody},
		{on[:2], false, nobody, nobody}, // without TLS: no Secret, the same hardening
		{append(slices.Clone(on), "hubble.relay.podSecurityContext.runAsUser=1001", "hubble.relay.podSecurityContext.runAsGroup=1002",
			"hubble.relay.podSecurityContext.fsGroup=1003", "hubble.ui.podSecurityContext.runAsUser=2001",
			"hubble.ui.podSecurityContext.runAsGroup=2002", "hubble.ui.podSecurityContext.fsGroup=2003"),
			true, podIDs{1001, 1002, 1003}, podIDs{2001, 2002, 2003}},
	} {
		objs := objects(t, template(t, c.sets...))
		for name, want := range map[string]podIDs{"hubble-relay": c.relay, "hubble-ui": c.ui} {
			what := fmt.Sprintf("--set %s: %s", strings.Join(c.sets, ","), name)
			pod := deployment(t, objs, name).Spec.Template.Spec
			checkNonRootPod(t, what, pod, want)
			if c.tls {
				checkTLSVolume(t, name, pod, name, 0o440)
			} else if len(pod.Volumes) != 0 {
				t.Errorf("%s: volumes %+v without hubble.tls.enabled, want none", what, pod.Volumes)
			}
		}
	}
	for _, set := range []string{"hubble.relay.podSecurityContext.runAsUser=0", "hubble.ui.podSecurityContext.fsGroup=0"} {
		path := "/" + strings.ReplaceAll(strings.TrimSuffix(set, "=0"), ".", "/")
		if out, failed := helmTemplate(t, "--set", set); !failed || !strings.Contains(out, "at '"+path+"'") {
			t.Errorf("helm template --set %s: failed %v, output %.300q; want a failure at '%s'", set, failed, out, path)
		}
	}
}

// checkNonRootPod: the pod runs as want (non-root, numeric IDs, fsGroup) with the
// runtime's seccomp filter; every container keeps those IDs, cannot escalate, has no
// capability, a read-only root and only read-only mounts.
func checkNonRootPod(t *testing.T, what string, pod corev1.PodSpec, want podIDs) {
	t.Helper()
	sc := pod.SecurityContext
	if sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot || sc.RunAsUser == nil || *sc.RunAsUser != want.uid ||
		sc.RunAsGroup == nil || *sc.RunAsGroup != want.gid || sc.FSGroup == nil || *sc.FSGroup != want.fsGroup ||
		sc.SeccompProfile == nil || sc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s: pod securityContext %+v, want runAsNonRoot, runAsUser %d, runAsGroup %d, fsGroup %d, seccomp RuntimeDefault",
			what, sc, want.uid, want.gid, want.fsGroup)
	}
	if len(pod.InitContainers) != 0 {
		t.Errorf("%s: init containers %v, want none", what, pod.InitContainers)
	}
	for _, c := range pod.Containers {
		csc := c.SecurityContext
		if csc == nil || csc.AllowPrivilegeEscalation == nil || *csc.AllowPrivilegeEscalation ||
			csc.ReadOnlyRootFilesystem == nil || !*csc.ReadOnlyRootFilesystem || (csc.Privileged != nil && *csc.Privileged) ||
			csc.Capabilities == nil || !slices.Equal(csc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(csc.Capabilities.Add) != 0 {
			t.Errorf("%s: container %s securityContext %+v, want allowPrivilegeEscalation false, readOnlyRootFilesystem, drop [ALL], nothing added",
				what, c.Name, csc)
			continue
		}
		if csc.RunAsUser != nil || csc.RunAsGroup != nil || csc.RunAsNonRoot != nil || csc.SeccompProfile != nil {
			t.Errorf("%s: container %s securityContext %+v overrides the pod's user, group or seccomp profile", what, c.Name, csc)
		}
		for _, m := range c.VolumeMounts {
			if !m.ReadOnly {
				t.Errorf("%s: container %s mounts %s writable at %s, want every mount read-only", what, c.Name, m.Name, m.MountPath)
			}
		}
	}
}
