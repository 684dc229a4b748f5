package connectivity

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one scenario's outcome.
type Result struct {
	Scenario string        `json:"scenario"`
	From     string        `json:"from"`
	To       string        `json:"to"`
	Expect   string        `json:"expect"`
	Status   string        `json:"status"` // passed, failed or skipped
	Detail   string        `json:"detail,omitempty"`
	Duration time.Duration `json:"duration"`
}

// The statuses of a Result.
const (
	Passed  = "passed"
	Failed  = "failed"
	Skipped = "skipped"
)

// printTable writes the per-scenario table and, for each failure, a line naming the
// hop and what was expected.
func printTable(out io.Writer, results []Result) {
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCENARIO\tFROM\tTO\tRESULT\tTIME")
	for _, r := range results {
		status := r.Status
		if r.Status == Skipped {
			status = "skipped: " + r.Detail
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Scenario, r.From, r.To, status, r.Duration.Round(time.Millisecond))
	}
	tw.Flush()
	for _, r := range results {
		if r.Status == Failed {
			fmt.Fprintln(out, failureLine(r))
		}
	}
}

// failureLine names the failing hop: "FAIL pod-to-pod/cross-node: from client
// (node-1, 10.244.0.3) to server-b (node-2) 10.244.1.4:8080: expected HTTP 200, got: ...".
func failureLine(r Result) string {
	return fmt.Sprintf("FAIL %s: from %s to %s: expected %s, got: %s", r.Scenario, r.From, r.To, r.Expect, r.Detail)
}

// summary is the run's error: nil when nothing failed.
func summary(results []Result) error {
	var failed []string
	passed, skipped := 0, 0
	for _, r := range results {
		switch r.Status {
		case Failed:
			failed = append(failed, r.Scenario)
		case Passed:
			passed++
		default:
			skipped++
		}
	}
	if len(failed) == 0 {
		return nil
	}
	return fmt.Errorf("%d of %d scenarios failed (%d passed, %d skipped): %s",
		len(failed), len(results), passed, skipped, strings.Join(failed, ", "))
}
