package api

import (
	"strings"
	"testing"
)

// A pod reference the agent records holds names and a path: a value too long, or
// one with a newline, a NUL, a '/' where none belongs, is refused naming the field.
func TestCheckPodRef(t *testing.T) {
	good := PodRef{ContainerID: "0123abcd", IfName: "eth0", Namespace: "kube-system", Pod: "coredns-5d78c9869d-abcde",
		PodUID: "2f4c7c1e-8b1a-4f7e-9a51-3c1d2e4f5a6b", NetNS: "/var/run/netns/cni-2f4c7c1e"}
	if err := CheckPodRef(good); err != nil {
		t.Fatalf("CheckPodRef(%+v) = %v", good, err)
	}
	if err := CheckPodRef(PodRef{ContainerID: "a"}); err != nil {
		t.Errorf("a reference with only a container id (DEL, no Kubernetes): %v", err)
	}
	for _, tt := range []struct {
		name string
		edit func(*PodRef)
		want string
	}{
		{"namespace with a newline", func(r *PodRef) { r.Namespace = "ns\nlevel=ERROR msg=forged" }, "namespace"},
		{"namespace too long", func(r *PodRef) { r.Namespace = strings.Repeat("a", MaxNamespace+1) }, "namespace"},
		{"pod name too long", func(r *PodRef) { r.Pod = strings.Repeat("p", 64<<10) }, "pod name"},
		{"pod name with a slash", func(r *PodRef) { r.Pod = "../../etc" }, "pod name"},
		{"pod name with a NUL", func(r *PodRef) { r.Pod = "p\x00q" }, "pod name"},
		{"pod name with a quote", func(r *PodRef) { r.Pod = `p"} 1` }, "pod name"},
		{"UID with a space", func(r *PodRef) { r.PodUID = "a b" }, "pod UID"},
		{"interface name too long", func(r *PodRef) { r.IfName = "eth0123456789012" }, "interface name"},
		{"interface name with a slash", func(r *PodRef) { r.IfName = "../x" }, "interface name"},
		{"relative netns", func(r *PodRef) { r.NetNS = "netns/x" }, "netns path"},
		{"netns with a newline", func(r *PodRef) { r.NetNS = "/run/netns/x\ny" }, "netns path"},
		{"netns too long", func(r *PodRef) { r.NetNS = "/" + strings.Repeat("n", MaxNetNSPath) }, "netns path"},
		{"container id", func(r *PodRef) { r.ContainerID = "../x" }, "container id"},
		{"container id too long", func(r *PodRef) { r.ContainerID = strings.Repeat("c", MaxContainerID+1) }, "at most 1024"},
	} {
		ref := good
		tt.edit(&ref)
		err := CheckPodRef(ref)
		if err == nil || !strings.Contains(err.Error(), tt.want) || len(err.Error()) > 512 || strings.ContainsAny(err.Error(), "\n\x00") {
			t.Errorf("%s: %v; want a short one-line error naming the %s", tt.name, err, tt.want)
		}
	}
}
