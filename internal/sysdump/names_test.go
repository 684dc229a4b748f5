package sysdump

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/myelin-net/myelin/internal/podexec"
)

// evilMapsNode is an agent whose map names try to leave the archive's directory.
type evilMapsNode struct{ fakeNode }

var evilMapNames = []string{"../../../../../x", "..", "a/b", `a\b`, "x\x00y", "", "ok..ok"}

func (evilMapsNode) Maps(context.Context, int) (map[string]any, error) {
	m := map[string]any{"myelin_ct": MapDump{Total: 1}}
	for _, name := range evilMapNames {
		m[name] = MapDump{}
	}
	return m, nil
}

// Map names are keys an agent pod chose: one that is not a plain file name is left out
// (and said so in the manifest), and no entry lies outside the top directory.
func TestMapNamesStayInArchive(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{evilMapsNode{fakeNode{"n1"}}}, Output: out}); err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out)
	var top string
	for name := range files {
		top = strings.SplitN(name, "/", 2)[0]
		break
	}
	for name := range files {
		if clean := path.Clean(name); !strings.HasPrefix(clean, top+"/") || strings.ContainsAny(name, "\\\x00") {
			t.Errorf("entry %q lies outside %s/", name, top)
		}
	}
	if _, ok := files[top+"/nodes/n1/maps/myelin_ct.json"]; !ok {
		t.Error("the map with a plain name is missing")
	}
	if len(files) != len(archiveEntries(t, out)) {
		t.Error("the archive holds an entry twice")
	}
	var man Manifest
	if err := json.Unmarshal([]byte(files[top+"/manifest.json"]), &man); err != nil {
		t.Fatal(err)
	}
	for _, name := range evilMapNames {
		if e := man.Errors[fmt.Sprintf("nodes/n1/maps/%q", name)]; !strings.Contains(e, "not a plain file name") {
			t.Errorf("manifest errors %v: none for map name %q", man.Errors, name)
		}
	}
}

// The archive refuses any entry name that would leave its top directory, whoever
// builds the name.
func TestArchiveAddStaysUnderTop(t *testing.T) {
	a := newArchive(&bytes.Buffer{}, "top", time.Now())
	for _, name := range []string{"../x", "a/../../x", "..", "", "a\\..\\x", "a\x00b"} {
		if err := a.add(name, []byte("x")); err == nil {
			t.Errorf("add(%q) wrote an entry", name)
		}
	}
	if len(a.files) != 0 {
		t.Errorf("files written: %q", a.files)
	}
	if err := a.add("nodes/n1/status.json", []byte("{}")); err != nil {
		t.Errorf("add of a plain name: %v", err)
	}
}

// Two agents that say they are one node (two running pods on it) write two
// directories, not each other's files twice.
func TestDuplicateNodeNames(t *testing.T) {
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{fakeNode{"n1"}, fakeNode{"n1"}}, Output: out}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range archiveEntries(t, out) {
		if seen[e.Name] {
			t.Errorf("entry %s twice", e.Name)
		}
		seen[e.Name] = true
	}
	var n1, n12 bool
	for name := range seen {
		n1 = n1 || strings.Contains(name, "/nodes/n1/status.json")
		n12 = n12 || strings.Contains(name, "/nodes/n1-2/status.json")
	}
	if !n1 || !n12 {
		t.Errorf("entries %v: want nodes/n1/ and nodes/n1-2/", seen)
	}
}

// A node with two running agent pods (a rollout) names each after its pod too.
func TestPodNodesSharedNode(t *testing.T) {
	pod := func(name, node string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "kube-system", Labels: map[string]string{"app.kubernetes.io/name": "myelin"}},
			Spec:       corev1.PodSpec{NodeName: node},
			Status:     corev1.PodStatus{Phase: corev1.PodRunning},
		}
	}
	cs := fake.NewSimpleClientset(pod("myelin-a", "n1"), pod("myelin-b", "n1"), pod("myelin-c", "n2"))
	nodes, err := PodNodes(context.Background(), cs, podexec.API{}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, n := range nodes {
		names = append(names, n.Name())
	}
	want := map[string]bool{"n1-myelin-a": true, "n1-myelin-b": true, "n2": true}
	if len(names) != 3 {
		t.Fatalf("names %v, want %v", names, want)
	}
	for _, n := range names {
		if !want[n] {
			t.Errorf("names %v, want %v", names, want)
		}
	}
}
