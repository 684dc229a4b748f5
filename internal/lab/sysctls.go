package lab

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// machineSysctls are the machine-wide (not per-netns) sysctls the kubelet sets when it
// starts (pkg/kubelet/cm setupKernelTunables; protectKernelDefaults would only make it
// refuse to start). The lab promises not to change the machine, so it records them
// before the first kubelet starts and puts them back after each start.
var machineSysctls = []string{
	"vm/overcommit_memory", "vm/panic_on_oom", "kernel/panic", "kernel/panic_on_oops",
	"kernel/keys/root_maxkeys", "kernel/keys/root_maxbytes",
}

const procSys = "/proc/sys"

func readSysctls() (map[string]string, error) {
	vals := map[string]string{}
	for _, k := range machineSysctls {
		b, err := os.ReadFile(filepath.Join(procSys, k))
		if err != nil {
			return nil, fmt.Errorf("read sysctl %s: %w", k, err)
		}
		vals[k] = strings.TrimSpace(string(b))
	}
	return vals, nil
}

// saveSysctls records the current values in file, unless it already holds a record
// (a re-run must not record what a kubelet changed).
func saveSysctls(file string) error {
	if exists(file) {
		return nil
	}
	vals, err := readSysctls()
	if err != nil {
		return err
	}
	return writeJSON(file, vals)
}

// restoreSysctls writes back every recorded value that differs now; no record, no-op.
func restoreSysctls(file string) error {
	var want map[string]string
	if err := readJSON(file, &want); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	now, err := readSysctls()
	if err != nil {
		return err
	}
	for k, v := range want {
		if now[k] == v {
			continue
		}
		if err := os.WriteFile(filepath.Join(procSys, k), []byte(v), 0o644); err != nil {
			return fmt.Errorf("restore sysctl %s to %s: %w", k, v, err)
		}
	}
	return nil
}
