package conformance

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"
)

// Spec is one test of the suite as its JSON report tells it.
type Spec struct {
	Name   string // the full text, as --ginkgo.focus matches it
	State  string // passed, failed, skipped, timedout, panicked, interrupted, aborted, pending
	Reason string // the first line of the failure or skip message
	Took   time.Duration
}

// Result is a run: the specs it ran or skipped at run time (filtered-out ones are
// left out), and the images the nodes lacked.
type Result struct {
	Specs         []Spec
	MissingImages []string
	Duration      time.Duration
}

// report mirrors what Result needs of ginkgo's JSON report (types.Report).
type report struct {
	SpecReports []struct {
		ContainerHierarchyTexts []string
		LeafNodeText            string
		LeafNodeType            string
		LeafNodeLabels          []string
		State                   string
		RunTime                 time.Duration
		Failure                 struct{ Message string }
	}
}

// ReadReport reads the JSON report e2e.test (or ginkgo) wrote.
func ReadReport(path string) (Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Result{}, err
	}
	var reports []report
	if err := json.Unmarshal(b, &reports); err != nil {
		return Result{}, fmt.Errorf("parse %s: %w", path, err)
	}
	var res Result
	for _, r := range reports {
		for _, s := range r.SpecReports {
			if s.LeafNodeType != "It" {
				continue
			}
			reason := strings.TrimSpace(s.Failure.Message)
			if s.State == "skipped" && reason == "" {
				continue // not focused
			}
			if i := strings.IndexByte(reason, '\n'); i >= 0 {
				reason = reason[:i]
			}
			name := strings.Join(append(append([]string{}, s.ContainerHierarchyTexts...), s.LeafNodeText), " ")
			for _, l := range s.LeafNodeLabels {
				if !strings.Contains(name, "["+l+"]") {
					name += " [" + l + "]"
				}
			}
			res.Specs = append(res.Specs, Spec{Name: name, State: s.State, Reason: reason, Took: s.RunTime})
		}
	}
	sort.Slice(res.Specs, func(i, j int) bool { return res.Specs[i].Name < res.Specs[j].Name })
	return res, nil
}

// Passed counts the specs that passed.
func (r Result) Passed() int { return r.count("passed") }

// Skipped counts the specs the suite skipped at run time (a reason is given).
func (r Result) Skipped() int { return r.count("skipped") }

func (r Result) count(state string) int {
	n := 0
	for _, s := range r.Specs {
		if s.State == state {
			n++
		}
	}
	return n
}

// Summary is "N/M passed (F failed, S skipped)", M counting every spec the run reached.
func (r Result) Summary() string {
	failed := len(r.Specs) - r.Passed() - r.Skipped()
	return fmt.Sprintf("%d/%d passed (%d failed, %d skipped)", r.Passed(), len(r.Specs), failed, r.Skipped())
}

// Details lists every spec that did not pass with its state and reason, then the
// images the nodes lacked.
func (r Result) Details() string {
	var b strings.Builder
	for _, s := range r.Specs {
		if s.State != "passed" {
			fmt.Fprintf(&b, "- %s: %s — %s\n", s.State, s.Name, s.Reason)
		}
	}
	for _, image := range r.MissingImages {
		fmt.Fprintf(&b, "- missing image: %s\n", image)
	}
	return b.String()
}
