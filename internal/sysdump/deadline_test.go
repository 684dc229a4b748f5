package sysdump

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// stuckExec is a pods/exec whose commands never end: each returns when its context
// does, with ctx's error or, with lost set, with no output and no error (what an exec
// whose output went missing looks like). It counts the calls of each command.
type stuckExec struct {
	lost bool

	mu    sync.Mutex
	calls map[string]int
}

func (s *stuckExec) Exec(ctx context.Context, _, _ string, argv []string) (string, error) {
	s.mu.Lock()
	s.calls[strings.Join(argv, " ")]++
	s.mu.Unlock()
	<-ctx.Done()
	if s.lost {
		return "", nil
	}
	return "", ctx.Err()
}

func stuckPodNode(ex *stuckExec, timeout time.Duration) PodNode {
	return PodNode{Client: fake.NewClientset(), Exec: ex, timeout: timeout, DropsFor: time.Millisecond,
		Pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "myelin-x"}, Spec: corev1.PodSpec{NodeName: "n1"}}}
}

// dumpNode dumps the one node n with a node deadline of nodeTimeout and returns the
// manifest's errors.
func dumpNode(t *testing.T, n Node, nodeTimeout time.Duration) map[string]string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "dump.tar.gz")
	var log strings.Builder
	if err := Run(context.Background(), &log, Options{Nodes: []Node{n}, Output: out, nodeTimeout: nodeTimeout}); err != nil {
		t.Fatal(err)
	}
	var man Manifest
	for name, body := range readArchive(t, out) {
		if strings.HasSuffix(name, "/manifest.json") {
			if err := json.Unmarshal([]byte(body), &man); err != nil {
				t.Fatal(err)
			}
		}
	}
	return man.Errors
}

// A command that ran until its deadline is not run again, whether its exec came back
// with an error or with nothing: only quick empty answers (outputs lost on the way)
// are retried.
func TestPodNodeTimedOutNotRetried(t *testing.T) {
	for _, lost := range []bool{false, true} {
		ex := &stuckExec{lost: lost, calls: map[string]int{}}
		errs := dumpNode(t, stuckPodNode(ex, time.Millisecond), time.Hour)
		if len(ex.calls) < 5 {
			t.Errorf("lost %v: %d commands run, want every one of the node's: %v", lost, len(ex.calls), ex.calls)
		}
		for argv, calls := range ex.calls {
			if calls != 1 {
				t.Errorf("lost %v: %q run %d times, want once", lost, argv, calls)
			}
		}
		if e := errs["nodes/n1/status.json"]; !strings.Contains(e, "no answer in") {
			t.Errorf("lost %v: status.json error %q, want it to say the command got no answer", lost, e)
		}
	}
}

// A node that hangs costs at most the node's deadline: the command running then is
// stopped, no other is started, and the manifest says the node was cut short.
func TestPodNodeDeadline(t *testing.T) {
	ex := &stuckExec{calls: map[string]int{}}
	errs := dumpNode(t, stuckPodNode(ex, 0), 10*time.Millisecond)
	if len(ex.calls) != 1 {
		t.Errorf("commands run: %v, want only the first (the others after the node's deadline)", ex.calls)
	}
	for argv, calls := range ex.calls {
		if calls != 1 {
			t.Errorf("%q run %d times, want once", argv, calls)
		}
	}
	e := errs["nodes/n1/"]
	for _, want := range []string{"node n1", "stopped after", "left out"} {
		if !strings.Contains(e, want) {
			t.Errorf("manifest error for nodes/n1/ %q: want it to say %q", e, want)
		}
	}
}

// flakyExec answers each command with the next of answers, quickly: outputs lost or
// cut short on their way back, then a whole one.
type flakyExec struct {
	answers []string
	calls   int
}

func (f *flakyExec) Exec(context.Context, string, string, []string) (string, error) {
	f.calls++
	return f.answers[min(f.calls, len(f.answers))-1], nil
}

// Quick answers that are empty or not whole JSON are asked for again.
func TestPodNodeQuickLossRetried(t *testing.T) {
	ex := &flakyExec{answers: []string{"", `{"state":`, `{"state":"ready"}`}}
	n := PodNode{Exec: ex, Pod: corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "myelin-x"}}}
	v, err := n.Agent(context.Background(), "status")
	if raw, ok := v.(json.RawMessage); err != nil || !ok || string(raw) != `{"state":"ready"}` || ex.calls != 3 {
		t.Errorf("status %s (%v) after %d calls, want the whole answer at the third", v, err, ex.calls)
	}
}
