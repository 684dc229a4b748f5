package api

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/utils"
)

// The longest values CheckPodRef takes: for the pod, Kubernetes' own bounds on a
// namespace (a DNS label) and a pod name (a DNS subdomain), and room for any UID
// format; PATH_MAX less its NUL for the netns path.
const (
	// MaxContainerID bounds the container id of a new attachment: runtimes use 64
	// hex digits; the CNI spec sets no bound, but the agent keeps each allocation's id
	// in ipam.json, which it rewrites whole on every change.
	MaxContainerID = 1024
	MaxNamespace   = 63
	MaxPodName     = 253
	MaxPodUID      = 128
	MaxNetNSPath   = 4095
)

// CheckPodRef returns an error for a pod reference the agent must not record: a
// container id that is no CNI container id or longer than MaxContainerID, or a namespace, pod name, UID, interface
// name or netns path that is too long or holds characters none of them has (a
// newline, a NUL, a '/'). Each field but the container id may be empty (DEL and
// runtimes outside Kubernetes pass less). The agent keeps what it takes in its state
// files, logs and Events, so it checks even its own plugin's requests.
func CheckPodRef(ref PodRef) error {
	if err := CheckContainerID(ref.ContainerID); err != nil {
		return err
	}
	if len(ref.ContainerID) > MaxContainerID {
		return fmt.Errorf("container id %s is %d bytes long, at most %d (runtimes use 64)", clipQuote(ref.ContainerID), len(ref.ContainerID), MaxContainerID)
	}
	if err := CheckPodNames(ref.Namespace, ref.Pod, ref.PodUID); err != nil {
		return fmt.Errorf("container %s: %w", clipQuote(ref.ContainerID), err)
	}
	if ref.IfName != "" {
		if e := utils.ValidateInterfaceName(ref.IfName); e != nil {
			return fmt.Errorf("container %s: interface name (CNI_IFNAME) %s: %s", clipQuote(ref.ContainerID), clipQuote(ref.IfName), e.Msg)
		}
	}
	if err := checkNetNSPath(ref.NetNS); err != nil {
		return fmt.Errorf("container %s: %w", clipQuote(ref.ContainerID), err)
	}
	return nil
}

// CheckPodNames returns an error for a pod namespace, name or UID that is too long or
// is no Kubernetes name; each may be empty.
func CheckPodNames(namespace, pod, uid string) error {
	for _, f := range []struct {
		what, value string
		max         int
	}{
		{"namespace (K8S_POD_NAMESPACE)", namespace, MaxNamespace},
		{"pod name (K8S_POD_NAME)", pod, MaxPodName},
		{"pod UID (K8S_POD_UID)", uid, MaxPodUID},
	} {
		if err := checkName(f.what, f.value, f.max); err != nil {
			return err
		}
	}
	return nil
}

// checkName checks a namespace, pod name or UID ("" passes).
func checkName(what, v string, max int) error {
	switch {
	case v == "":
		return nil
	case len(v) > max:
		return fmt.Errorf("%s is %d bytes long, at most %d: %s", what, len(v), max, clipQuote(v))
	case !containerIDPattern.MatchString(v):
		return fmt.Errorf("%s %s is not a Kubernetes name (letters, digits, '_', '.', '-', starting with a letter or digit)", what, clipQuote(v))
	}
	return nil
}

// checkNetNSPath checks a netns path ("" passes: DEL may have none).
func checkNetNSPath(p string) error {
	switch {
	case p == "":
		return nil
	case len(p) > MaxNetNSPath:
		return fmt.Errorf("netns path (CNI_NETNS) is %d bytes long, at most %d: %s", len(p), MaxNetNSPath, clipQuote(p))
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("netns path (CNI_NETNS) %s is not an absolute path", clipQuote(p))
	case strings.ContainsFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("netns path (CNI_NETNS) %s holds a control character (a newline, a NUL), which no runtime's netns path has", clipQuote(p))
	}
	return nil
}

// clipQuote quotes a value for an error, cut to 64 bytes so a huge one gives a short error.
func clipQuote(s string) string { return QuoteClipped(s, 64) }

// QuoteClipped quotes s for an error message, cut to max bytes with its length said,
// so a huge input gives a short error.
func QuoteClipped(s string, max int) string {
	if len(s) <= max {
		return fmt.Sprintf("%q", s)
	}
	return fmt.Sprintf("%q... (%d bytes)", s[:max], len(s))
}
