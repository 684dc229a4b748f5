package bench

import (
	"errors"
	"fmt"
	"os/exec"
	"path"
	"strings"

	"golang.org/x/sys/unix"
)

// ErrNoSuchCase is returned by Select when a pattern matches no case.
var ErrNoSuchCase = errors.New("no such case")

// Validate checks that case names are unique and complete and that every baseline is a
// case of the same stage.
func Validate(cases []Case) error {
	byName := map[string]Case{}
	for _, c := range cases {
		if c.Name == "" || c.Env == nil || c.Workload == nil {
			return fmt.Errorf("bench case %q: needs a name, an environment and a workload", c.Name)
		}
		if _, dup := byName[c.Name]; dup {
			return fmt.Errorf("bench case %q: defined twice", c.Name)
		}
		byName[c.Name] = c
	}
	for _, c := range cases {
		if c.Baseline == "" {
			continue
		}
		b, ok := byName[c.Baseline]
		if !ok {
			return fmt.Errorf("bench case %q: baseline %q is not among the cases", c.Name, c.Baseline)
		}
		if b.Stage != c.Stage {
			return fmt.Errorf("bench case %q: baseline %q runs in stage %q, not %q; ratios need the same rounds",
				c.Name, c.Baseline, b.Stage, c.Stage)
		}
	}
	return nil
}

// Select returns the cases matching any of the patterns, in catalog order, together with
// the baselines they are compared to. A pattern is a case name, a leading part of one
// ending at a "/" ("veth-pair" or "veth-pair/tcp-rr"), or a glob of either
// ("*/tcp-rr/same-vcpu", "svc-*").
// No patterns selects every case.
func Select(all []Case, patterns []string) ([]Case, error) {
	if len(patterns) == 0 {
		return all, nil
	}
	want := map[string]bool{}
	for _, p := range patterns {
		n := 0
		for _, c := range all {
			if matches(p, c.Name) {
				want[c.Name] = true
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("--cases %q: %w; myelin bench --list shows them", p, ErrNoSuchCase)
		}
	}
	// Pull in baselines (and theirs) so every ratio has its reference in the same rounds.
	for changed := true; changed; {
		changed = false
		for _, c := range all {
			if want[c.Name] && c.Baseline != "" && !want[c.Baseline] {
				want[c.Baseline], changed = true, true
			}
		}
	}
	var out []Case
	for _, c := range all {
		if want[c.Name] {
			out = append(out, c)
		}
	}
	return out, nil
}

// matches reports whether pattern (a name or glob, see Select) matches name or one of
// its leading parts ending at a "/", so that "svc-*" selects every case of the svc-*
// environments.
func matches(pattern, name string) bool {
	pattern = strings.TrimSuffix(pattern, "/")
	parts := strings.Split(name, "/")
	for i := 1; i <= len(parts); i++ {
		if ok, _ := path.Match(pattern, strings.Join(parts[:i], "/")); ok {
			return true
		}
	}
	return false
}

// Availability says why a case cannot run on this machine, or nil: its environment, the
// tools its workload runs, and the vCPUs its placement pins to.
func Availability(c Case) error {
	if err := c.Env.Available(); err != nil {
		return err
	}
	for _, tool := range workloadTools(c.Workload) {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("needs %s, which is not installed (make setup installs it)", tool)
		}
	}
	if need := c.Placement.maxCPU(); need >= 0 && !cpuUsable(need) {
		return fmt.Errorf("placement %s needs vCPU %d, which this process may not use", c.Placement.Name, need)
	}
	return nil
}

// cpuUsable reports whether this process may run on vCPU cpu.
func cpuUsable(cpu int) bool {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return false
	}
	return set.IsSet(cpu)
}
