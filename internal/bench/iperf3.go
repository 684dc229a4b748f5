package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/myelin-net/myelin/internal/logtail"
)

// Metric names of the iperf3 UDP workload.
const (
	MetricLoss     = "loss_pct"
	MetricReceived = "received_mbps"
	MetricJitter   = "jitter_ms"
)

// Iperf3Server is iperf3 -s listening on the environment's server address.
var Iperf3Server = &ServerSpec{
	Name:     "iperf3",
	BasePort: 5201,
	Argv: func(addr netip.Addr, port int) []string {
		return []string{"iperf3", "-s", "-B", addr.String(), "-p", strconv.Itoa(port)}
	},
}

// DefaultUDPRate is the offered load of the UDP loss workload: high enough that a slow
// datapath drops at the same placement, low enough that a good one keeps up on small VMs.
const DefaultUDPRate = "500M"

// IperfUDP offers UDP at a fixed rate with iperf3 and reports the loss.
type IperfUDP struct {
	Rate string // iperf3 -b, e.g. "500M"
}

// UDPLoss is the iperf3 UDP workload at DefaultUDPRate.
func UDPLoss() Workload { return IperfUDP{Rate: DefaultUDPRate} }

// Name implements Workload.
func (u IperfUDP) Name() string { return "udp-loss" }

// Describe implements Workload.
func (u IperfUDP) Describe() string {
	return fmt.Sprintf("iperf3 UDP offered at %sbit/s: loss %%, received Mbit/s, jitter, CPU per KB", u.Rate)
}

// Metrics implements Workload.
func (u IperfUDP) Metrics() []Metric {
	return []Metric{
		{Name: MetricLoss, Unit: "%", Description: "datagrams lost at the offered rate"},
		{Name: MetricReceived, Unit: "Mbit/s", HigherIsBetter: true, Description: "rate the server received"},
		{Name: MetricJitter, Unit: "ms", Description: "receiver jitter"},
		{Name: MetricStatCPU, Unit: "µs/KB", Description: "busy CPU of the whole machine per KB received, from /proc/stat"},
	}
}

// Tools implements ToolUser.
func (u IperfUDP) Tools() []string { return []string{"iperf3", "taskset", "nsenter"} }

// Server implements ClientServer.
func (u IperfUDP) Server() *ServerSpec { return Iperf3Server }

// Argv is the iperf3 client command line of one trial.
func (u IperfUDP) Argv(t Trial) []string {
	return []string{"iperf3", "-c", t.Server.Addr.String(), "-p", strconv.Itoa(t.Server.Port),
		"-u", "-b", u.Rate, "-t", strconv.Itoa(seconds(t.Duration)), "-J"}
}

// Run implements Workload. The server is pinned by taskset when started; the client by
// the Host.
func (u IperfUDP) Run(ctx context.Context, t Trial) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, t.Duration+toolGrace)
	defer cancel()
	meter := startCPUMeter()
	cmd := t.Client.Command(ctx, t.Placement.Client, u.Argv(t)...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	runErr := cmd.Run()
	busy, busyOK := meter.busySeconds()
	// iperf3 -J reports its own errors in the JSON (and exits 1); prefer that message.
	r, err := ParseIperf3UDP(stdout.Bytes())
	if err != nil {
		if runErr != nil {
			return nil, fmt.Errorf("iperf3 UDP to %s:%d: %w: %v %s", t.Server.Addr, t.Server.Port, err, runErr, logtail.Last(stderr.String()))
		}
		return nil, err
	}
	s := Sample{MetricLoss: r.LostPercent, MetricReceived: r.BitsPerSecond / 1e6, MetricJitter: r.JitterMs}
	if kb := r.Bytes / 1024; busyOK && kb > 0 {
		s[MetricStatCPU] = busy * 1e6 / kb
	}
	return s, nil
}

// Iperf3UDPResult is the receiver's summary of an iperf3 UDP test.
type Iperf3UDPResult struct {
	Seconds       float64 `json:"seconds"`
	Bytes         float64 `json:"bytes"`
	BitsPerSecond float64 `json:"bits_per_second"`
	JitterMs      float64 `json:"jitter_ms"`
	LostPackets   float64 `json:"lost_packets"`
	Packets       float64 `json:"packets"`
	LostPercent   float64 `json:"lost_percent"`
}

// ParseIperf3UDP parses iperf3 -J output of a UDP client run and returns the receiver's
// side (end.sum_received), or the error iperf3 reported.
func ParseIperf3UDP(out []byte) (Iperf3UDPResult, error) {
	var doc struct {
		Error string `json:"error"`
		End   struct {
			SumReceived *Iperf3UDPResult `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return Iperf3UDPResult{}, fmt.Errorf("parse iperf3 JSON: %w", err)
	}
	if doc.Error != "" {
		return Iperf3UDPResult{}, fmt.Errorf("iperf3: %s", doc.Error)
	}
	if doc.End.SumReceived == nil || doc.End.SumReceived.Packets == 0 {
		return Iperf3UDPResult{}, fmt.Errorf("parse iperf3 JSON: no end.sum_received (not a UDP client run?)")
	}
	return *doc.End.SumReceived, nil
}
