package e2e

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"strconv"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes"
)

// traffic is what the disruption tests run across nodes: an iperf3 TCP stream and an
// HTTP request every 100 ms, both from the client pod.
type traffic struct {
	iperf    *exec.Cmd
	stream   bytes.Buffer
	stop     chan struct{}
	wg       sync.WaitGroup
	total    int
	failures []string
}

// deployTrafficPods runs the pod "client" on clientNode and an iperf3 server and an
// HTTP server on serverNode, and returns the servers' IPs once all three are Running.
func deployTrafficPods(t *testing.T, cs kubernetes.Interface, clientNode, serverNode string) (iperfIP, webIP string) {
	t.Helper()
	createPod(t, cs, "client", clientNode, map[string]string{"app": "client"}, "sleep", "infinity")
	createPod(t, cs, "iperf", serverNode, map[string]string{"app": "iperf"}, "iperf3", "-s")
	createPod(t, cs, "web", serverNode, map[string]string{"app": "web"}, myelinBin, "lab", "serve", "--listen", ":8080")
	runningPods(t, cs, "app=client", 1)
	return runningPods(t, cs, "app=iperf", 1)[0].Status.PodIP, runningPods(t, cs, "app=web", 1)[0].Status.PodIP
}

// startTraffic starts a seconds-long iperf3 stream to iperfIP and the request loop to
// webIP:8080 from the pod "client".
func startTraffic(t *testing.T, iperfIP, webIP string, seconds int) *traffic {
	t.Helper()
	tr := &traffic{stop: make(chan struct{})}
	tr.iperf = exec.Command(myelinBin, "lab", "exec", "client", "--", "iperf3", "-c", iperfIP,
		"-t", strconv.Itoa(seconds), "-b", "100M", "-J")
	tr.iperf.Stdout, tr.iperf.Stderr = &tr.stream, &tr.stream
	if err := tr.iperf.Start(); err != nil {
		t.Fatal(err)
	}
	tr.wg.Add(1)
	go func() {
		defer tr.wg.Done()
		tr.total, tr.failures = requestLoop("http://"+webIP+":8080/", tr.stop)
	}()
	return tr
}

// finish waits for the stream to end, stops the request loop and fails the test on
// any error: the stream must complete and carry data, and no request may fail.
func (tr *traffic) finish(t *testing.T) {
	t.Helper()
	if err := tr.iperf.Wait(); err != nil {
		t.Errorf("iperf3 stream failed: %v\n%s", err, lastLines(tr.stream.String(), 15))
	}
	close(tr.stop)
	tr.wg.Wait()
	var report struct {
		End struct {
			SumReceived struct{ Bytes int64 } `json:"sum_received"`
		} `json:"end"`
		Error string `json:"error"`
	}
	if err := json.Unmarshal(tr.stream.Bytes(), &report); err != nil || report.Error != "" || report.End.SumReceived.Bytes == 0 {
		t.Errorf("iperf3 report: %v, error %q, %d bytes received", err, report.Error, report.End.SumReceived.Bytes)
	}
	// Every request must succeed; how many fit in the window is speed, not behaviour.
	if len(tr.failures) > 0 || tr.total == 0 {
		t.Errorf("request loop: %d of %d requests failed (none made counts as failed): %v", len(tr.failures), tr.total, tr.failures)
	}
	t.Logf("request loop: %d requests, %d failed; iperf3: %d bytes received", tr.total, len(tr.failures), report.End.SumReceived.Bytes)
}
