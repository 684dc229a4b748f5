package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Phase is where a lab is in its life.
type Phase string

const (
	PhaseStarting Phase = "starting"
	PhaseReady    Phase = "ready"
	PhaseFailed   Phase = "failed"
	PhaseStopping Phase = "stopping"
)

// ProcessState is what the supervisor knows of one child.
type ProcessState struct {
	Name     string    `json:"name"`
	PID      int       `json:"pid"`
	Running  bool      `json:"running"`
	Restarts int       `json:"restarts"`
	Started  time.Time `json:"started"`
	LastExit string    `json:"lastExit,omitempty"`
	Log      string    `json:"log"`
}

// State is the supervisor's report, written to the state file on every change.
type State struct {
	Phase     Phase          `json:"phase"`
	Error     string         `json:"error,omitempty"`
	Processes []ProcessState `json:"processes"`
	Updated   time.Time      `json:"updated"`
}

// record is what lab up writes when it builds a lab.
type record struct {
	Plan    labplan.Plan `json:"plan"`
	Created time.Time    `json:"created"`
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// ErrNoLab is returned when no lab has been built in the directory.
var ErrNoLab = errors.New("no lab is running; start one with: myelin lab up")

// LoadPlan reads the plan of the lab in paths.
func LoadPlan(paths labplan.Paths) (labplan.Plan, error) {
	var r record
	if err := readJSON(paths.PlanFile(), &r); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return labplan.Plan{}, ErrNoLab
		}
		return labplan.Plan{}, err
	}
	return r.Plan, nil
}

// LoadState reads the supervisor's last report.
func LoadState(paths labplan.Paths) (State, error) {
	var s State
	err := readJSON(paths.StateFile(), &s)
	return s, err
}
