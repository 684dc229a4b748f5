package bench

import (
	"bufio"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"

	"github.com/myelin-net/myelin/internal/lab/labplan"
)

// Machine describes the machine the figures come from.
type Machine struct {
	CPUModel    string            `json:"cpuModel"`
	VCPUs       int               `json:"vcpus"`
	MemoryMiB   int               `json:"memoryMiB"`
	Kernel      string            `json:"kernel"`
	Tools       map[string]string `json:"tools"`
	Environment string            `json:"environment,omitempty"` // e.g. the hypervisor, if known
	// LabRuntime is what ran the lab stages' pods (`lab up --runtime`): the bench always
	// uses the lab kubelet, the fast default.
	LabRuntime string `json:"labRuntime"`
}

// DescribeMachine reads the CPU model, vCPU count, memory, kernel release and the
// versions of the load generators. Missing pieces are left empty.
func DescribeMachine() Machine {
	m := Machine{
		CPUModel:   procField("/proc/cpuinfo", "model name"),
		VCPUs:      runtime.NumCPU(),
		MemoryMiB:  memTotalMiB(),
		Tools:      map[string]string{},
		LabRuntime: string(labplan.RuntimeLab),
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if b, err := os.ReadFile("/sys/class/dmi/id/sys_vendor"); err == nil {
		m.Environment = strings.TrimSpace(string(b))
	}
	for tool, argv := range map[string][]string{
		"netperf": {"netperf", "-V"},
		"iperf3":  {"iperf3", "--version"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err == nil {
			m.Tools[tool] = firstMatchingLine(string(out), "version", "iperf")
		}
	}
	return m
}

// procField returns the value of the first "key : value" line of a /proc file.
func procField(path, key string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == key {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

func memTotalMiB() int {
	f := strings.Fields(procField("/proc/meminfo", "MemTotal")) // "4030784 kB"
	if len(f) == 0 {
		return 0
	}
	kb, _ := strconv.Atoi(f[0])
	return kb / 1024
}

// firstMatchingLine returns the first line containing any of the words, else the first line.
func firstMatchingLine(s string, words ...string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines {
		for _, w := range words {
			if strings.Contains(strings.ToLower(l), w) {
				return strings.TrimSpace(l)
			}
		}
	}
	return strings.TrimSpace(lines[0])
}
