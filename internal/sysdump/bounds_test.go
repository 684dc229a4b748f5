package sysdump

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// endlessDump is a bpftool map dump that never ends (a map pods keep filling); it
// counts the bytes it served.
type endlessDump struct{ served int }

func (e *endlessDump) Read(p []byte) (int, error) {
	const entry = `{"key":["0x01"],"value":["0x02"]},`
	var n int
	if e.served == 0 {
		p[0] = '['
		n = 1
	}
	for n < len(p) {
		n += copy(p[n:], entry[(e.served+n-1)%len(entry):])
	}
	e.served += n
	return n, nil
}

// A map dump is read as it comes: at most limit bytes, the first max entries kept,
// the rest counted, and the cut said.
func TestReadEntriesBounded(t *testing.T) {
	r := &endlessDump{}
	d := ReadEntries(r, 3, 10000)
	if r.served > 10000 {
		t.Errorf("read %d bytes, want at most 10000", r.served)
	}
	if d.Shown != 3 || len(d.Entries) != 3 || d.Total < 100 {
		t.Errorf("dump: total %d, shown %d (%d entries); want 3 of over 100", d.Total, d.Shown, len(d.Entries))
	}
	if !strings.Contains(d.Error, "truncated at 10000 bytes") {
		t.Errorf("error %q, want it to say where the output was cut", d.Error)
	}
}

func TestReadEntries(t *testing.T) {
	d := ReadEntries(strings.NewReader(`[{"key":1},{"key":2},{"key":3}]`+"\n"), 2, 1<<20)
	if d.Total != 3 || d.Shown != 2 || string(d.Entries[1]) != `{"key":2}` || d.Error != "" {
		t.Errorf("dump %+v: want total 3, the first 2 shown, no error", d)
	}
	d = ReadEntries(strings.NewReader(`Error: bpf obj get: No such file`), 2, 1<<20)
	if !strings.Contains(d.Error, "not a JSON list") {
		t.Errorf("dump %+v: want an error saying the output is not a JSON list", d)
	}
}

// hungExec is a pods/exec whose command never ends: it returns when its context does,
// after noting whether that context had a deadline.
type hungExec struct{ deadline *bool }

func (h hungExec) Exec(ctx context.Context, _, _ string, _ []string) (string, error) {
	_, *h.deadline = ctx.Deadline()
	<-ctx.Done()
	return "", ctx.Err()
}

// Every command run in an agent pod has a deadline, and the error of one that hung
// names the command, the pod and the node.
func TestPodNodeExecDeadline(t *testing.T) {
	var deadline bool
	n := PodNode{Exec: hungExec{&deadline}, timeout: time.Millisecond, Pod: corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "myelin-x"}, Spec: corev1.PodSpec{NodeName: "n1"}}}
	_, err := n.Run(context.Background(), "ip", "route")
	if !deadline {
		t.Error("the command ran without a deadline")
	}
	for _, want := range []string{"ip route", "kube-system/myelin-x", "node n1", "no answer in"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v: want it to name %q", err, want)
		}
	}
	deadline = false
	if _, err := n.Drops(context.Background()); err == nil || !deadline {
		t.Errorf("drops: error %v, deadline %v; want a deadline and an error", err, deadline)
	}
}
