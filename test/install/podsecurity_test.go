package install

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// hostConfined says whether a container runs unconfined by AppArmor and as SELinux
// spc_t: the runtime's default profile (deny mount, deny writes under /sys/fs/*) and
// container_t would block pinning and writing the node's CNI files.
func hostConfined(c corev1.Container) bool {
	sc := c.SecurityContext
	return sc != nil && sc.AppArmorProfile != nil && sc.AppArmorProfile.Type == corev1.AppArmorProfileTypeUnconfined &&
		sc.SELinuxOptions != nil && sc.SELinuxOptions.Type == "spc_t" && sc.SELinuxOptions.Level == "s0"
}

// seccomp is the seccomp profile type a container runs with ("" for none set).
func seccomp(c corev1.Container) corev1.SeccompProfileType {
	if c.SecurityContext == nil || c.SecurityContext.SeccompProfile == nil {
		return ""
	}
	return c.SecurityContext.SeccompProfile.Type
}

// Every container that writes to the node escapes the default AppArmor and SELinux
// confinement, in agent and cleanup mode and with privileged, but keeps the runtime's
// seccomp filter unless privileged or told otherwise; the pod keeps the default
// dnsPolicy (no cluster DNS before myelin serves it); the agent never mounts a bpffs
// of its own.
func TestChartPodSecurity(t *testing.T) {
	for _, c := range []struct {
		sets    []string
		seccomp corev1.SeccompProfileType
	}{
		{labSets, corev1.SeccompProfileTypeRuntimeDefault},
		{[]string{"cleanup=true"}, corev1.SeccompProfileTypeRuntimeDefault},
		{[]string{"securityContext.seccompProfile=Unconfined"}, corev1.SeccompProfileTypeUnconfined},
		{[]string{"securityContext.privileged=true"}, ""},
	} {
		sets := c.sets
		spec := daemonSet(t, sets...).Spec.Template.Spec
		for _, ctr := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
			if !hostConfined(ctr) {
				t.Errorf("--set %v: container %s securityContext %+v, want appArmorProfile Unconfined and seLinuxOptions spc_t/s0",
					sets, ctr.Name, ctr.SecurityContext)
			}
			if got := seccomp(ctr); got != c.seccomp {
				t.Errorf("--set %v: container %s seccompProfile %q, want %q", sets, ctr.Name, got, c.seccomp)
			}
			if sc := ctr.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
				t.Errorf("--set %v: container %s securityContext %+v, want readOnlyRootFilesystem (it writes only to its mounts)",
					sets, ctr.Name, ctr.SecurityContext)
			}
		}
		for _, ctr := range spec.InitContainers {
			if sc := ctr.SecurityContext; sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("--set %v: init container %s securityContext %+v, want allowPrivilegeEscalation false (it has no capabilities)",
					sets, ctr.Name, sc)
			}
		}
		if spec.DNSPolicy != "" {
			t.Errorf("--set %v: dnsPolicy %s, want the default (the node's resolver for hostNetwork)", sets, spec.DNSPolicy)
		}
		if got := arg(spec.Containers[0], "--mount-bpffs"); got != "false" {
			t.Errorf("--set %v: %s --mount-bpffs=%q, want false (a mount in the pod never reaches the node)", sets, spec.Containers[0].Name, got)
		}
	}
}

// Cleanup pods turn ready only once their node is clean (the file --cleanup-done-file
// writes, in an emptyDir, tested by the readiness probe), and every node is cleaned at
// once, so kubectl rollout status returns only when every node is clean.
func TestChartCleanupPodReadyWhenClean(t *testing.T) {
	ds := daemonSet(t, "cleanup=true")
	c := ds.Spec.Template.Spec.Containers[0]
	done := arg(c, "--cleanup-done-file")
	if done == "" || !slices.Contains(c.Args, "--cleanup") {
		t.Fatalf("cleanup container args %v, want --cleanup and --cleanup-done-file", c.Args)
	}
	if p := c.ReadinessProbe; p == nil || p.Exec == nil || !slices.Equal(p.Exec.Command, []string{"test", "-f", done}) {
		t.Errorf("cleanup readiness probe %+v, want exec test -f %s", p, done)
	}
	mounted := false
	for _, m := range c.VolumeMounts {
		for _, v := range ds.Spec.Template.Spec.Volumes {
			if v.Name == m.Name && v.EmptyDir != nil && m.MountPath+"/" == done[:len(m.MountPath)+1] {
				mounted = true
			}
		}
	}
	if !mounted {
		t.Errorf("%s is on no emptyDir of the cleanup container (mounts %+v): it must be the pod's own, not the node's", done, c.VolumeMounts)
	}
	if ru := ds.Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxUnavailable == nil || ru.MaxUnavailable.String() != "100%" {
		t.Errorf("cleanup updateStrategy %+v, want RollingUpdate maxUnavailable 100%%", ds.Spec.UpdateStrategy)
	}
	if ru := daemonSet(t).Spec.UpdateStrategy.RollingUpdate; ru == nil || ru.MaxUnavailable.IntValue() != 1 {
		t.Errorf("agent updateStrategy %+v, want maxUnavailable 1", ru)
	}
	if p := daemonSet(t).Spec.Template.Spec.Containers[0].ReadinessProbe; p == nil || p.HTTPGet == nil {
		t.Errorf("agent readiness probe %+v, want GET /readyz", p)
	}
}
