package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/datapath"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// testPrefix keeps the tests' namespaces apart from the product's myelin-bench-*, which
// the end-to-end tests count as lab leftovers.
const testPrefix = "bhtest-"

// TestPrivilegedBenchBaselines runs one 1 s round of TCP_RR over loopback and the veth pair
// through Bench, and checks that the report has figures and nothing is left behind. It
// asserts no speed.
func TestPrivilegedBenchBaselines(t *testing.T) {
	testenv.RequireRoot(t, "create network namespaces")
	testenv.RequireTools(t, "netperf", "netserver", "nsenter", "taskset", "ss", "ip")
	if left := netns.Named(testPrefix); len(left) > 0 {
		t.Fatalf("leftover namespaces of an earlier run: %v; remove them with ip netns del", left)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	var log bytes.Buffer
	err := Bench(ctx, &log, Options{Rounds: 1, Duration: time.Second, OutDir: dir, Prefix: testPrefix,
		Cases: []string{"veth-pair/tcp-rr/same-vcpu"}, Command: "go test"})
	t.Log(log.String())
	if err != nil {
		t.Fatal(err)
	}
	if left := netns.Named(testPrefix); len(left) > 0 {
		t.Errorf("namespaces left behind: %v", left)
	}

	var res Results
	if err := json.Unmarshal([]byte(readFile(t, filepath.Join(dir, ReportJSON))), &res); err != nil {
		t.Fatal(err)
	}
	got := map[string]Sample{}
	for _, r := range res.Runs {
		if r.Error != "" {
			t.Errorf("%s failed: %s", r.Case, r.Error)
		}
		got[r.Case] = r.Values
	}
	for _, name := range []string{"loopback/tcp-rr/same-vcpu", "veth-pair/tcp-rr/same-vcpu"} {
		if s := got[name]; s[MetricRate] <= 0 || s[MetricP99] <= 0 {
			t.Errorf("%s: sample %v lacks a rate and a P99 latency", name, s)
		}
	}
	md := readFile(t, filepath.Join(dir, ReportMarkdown))
	if !strings.Contains(md, "| veth-pair/tcp-rr/same-vcpu | rate (trans/s) |") || !strings.Contains(md, "× loopback/tcp-rr/same-vcpu") {
		t.Errorf("report.md lacks the veth pair's rate and ratio:\n%s", md)
	}
	if _, err := os.Stat(filepath.Join(dir, "tcp-rr-rate.svg")); err != nil {
		t.Error(err)
	}
}

// TestPrivilegedNetNSHostCgroup: a NetNSHost with a Cgroup runs its tool in that cgroup
// v2 directory (creating it), where a lab node's socket-LB would serve it.
func TestPrivilegedNetNSHostCgroup(t *testing.T) {
	testenv.RequireRoot(t, "create a cgroup")
	testenv.RequireTools(t, "nsenter", "sh")
	mnt, err := datapath.Cgroup2Mount()
	if err != nil {
		t.Fatal(err)
	}
	name := testPrefix + strconv.Itoa(os.Getpid())
	dir := filepath.Join(mnt, name)
	t.Cleanup(func() {
		if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
			t.Errorf("remove cgroup %s: %v", dir, err)
		}
	})
	out, err := NetNSHost{Path: "/proc/self/ns/net", Cgroup: dir}.Command(context.Background(), -1, "cat", "/proc/self/cgroup").CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !strings.Contains(string(out), "0::/"+name+"\n") {
		t.Errorf("the tool ran in %q, want the cgroup v2 directory /%s", out, name)
	}
}
