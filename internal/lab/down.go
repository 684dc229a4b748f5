package lab

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/lab/labplan"
	"github.com/myelin-net/myelin/internal/lockfile"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/nodelayout"
)

// Places outside the lab directory where lab nodes keep per-node state (one directory per node, below the real node's: internal/nodelayout).
var (
	bpffsDir   = nodelayout.BPFFSDir
	nodeRunDir = nodelayout.StateDir
)

// podDeleteTimeout bounds how long down waits for the kubelets to delete the pods.
const podDeleteTimeout = time.Minute

// Down removes everything a lab made: pods (while the kubelets run), processes,
// network namespaces (and with them every link inside), the root netns link, the
// containerd runtime's mounts, shim sockets, container log links and cgroups, the
// machine's sysctls as they were, bpffs pins (and the bpffs, when lab up mounted it), per-node state and the lab directory. It finds leftovers by name, so it works after a crash or an interrupted
// up, and does nothing (successfully) when nothing is there. A lab directory that
// holds files but not lab up's marker (labplan.MarkerFile) is not a lab's: Down then
// removes only what it finds by name (namespaces, links, cgroups, node directories),
// leaves the directory and what runs from it alone, and says so in its error.
// It holds the lab's lock (lock.go) while it runs, and fails at once with ErrBusy
// while another lab up, down or restart holds it.
func Down(paths labplan.Paths, out io.Writer) error {
	l, err := lockLab(paths)
	if err != nil {
		return err
	}
	defer l.release(true)
	return down(paths, out)
}

// down is Down without the lock (lab up's cleanup runs it holding up's).
func down(paths labplan.Paths, out io.Writer) error {
	var problems []string
	note := func(format string, a ...any) { fmt.Fprintf(out, format+"\n", a...) }

	// What is found through the lab directory (the plan, processes and mounts in it,
	// what its records say the lab created) is acted on only when it is a lab's
	// (marked), or gone (processes a crashed lab left may still name it). An empty
	// directory is only removed: it may be a mount point or another program's.
	st := labDirState(paths)
	own := st == dirMarked || st == dirAbsent
	if plan, err := LoadPlan(paths); own && err == nil && plan.Options.Runtime == labplan.RuntimeContainerd && Running(paths) {
		if err := deletePods(paths, podDeleteTimeout); err != nil {
			note("deleting the pods before stopping the kubelets: %v (continuing)", err)
		}
	}
	if stopSupervisor(paths) {
		note("stopped the lab supervisor")
	}
	if n := killLabProcesses(paths, own); n > 0 {
		note("killed %d leftover lab processes", n)
	}
	problems = append(problems, downRuntime(paths, own, note)...)
	for _, ns := range LeftoverNetNS() {
		if err := run("ip", "netns", "del", ns); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		note("removed netns %s", ns)
	}
	for _, link := range leftoverRootLinks() {
		if err := run("ip", "link", "del", link); err != nil {
			if run("ip", "link", "show", link) != nil {
				continue // a veth whose peer's netns just went: the kernel removed it meanwhile
			}
			problems = append(problems, err.Error())
			continue
		}
		note("removed link %s", link)
	}
	problems = append(problems, removeNodeDirs(note)...)
	problems = append(problems, removeBenchLocks(note)...)
	if own {
		if err := unmountBPFFS(paths.BPFFSMounted(), note); err != nil { // bpffs.go
			problems = append(problems, err.Error())
		}
	}
	if err := removeLabDir(paths, len(problems) > 0, note); err != nil { // labdir.go
		if !own {
			if len(problems) == 0 {
				return err
			}
			return fmt.Errorf("%w; and lab down left things behind: %s", err, strings.Join(problems, "; "))
		}
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("lab down left things behind: %s; run myelin lab down again, or remove them by hand",
			strings.Join(problems, "; "))
	}
	return nil
}

// stopSupervisor asks the supervisor to stop its children and waits for it.
func stopSupervisor(paths labplan.Paths) bool {
	pid := supervisorPID(paths)
	if pid == 0 {
		return false
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(stopGrace + 5*time.Second)
	for time.Now().Before(deadline) && processAlive(pid) {
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	return true
}

// supervisorPID returns the pid of the running supervisor of paths, or 0.
func supervisorPID(paths labplan.Paths) int { return supervisorPIDIn("/proc", paths) }

// supervisorPIDIn is supervisorPID with the proc filesystem at proc. The pid file's
// process counts only when it is this lab's supervisor by its arguments
// (isSupervisorOf): after a crash the pid may be another program's now (supervisord,
// s6-supervise), which lab down must not stop.
func supervisorPIDIn(proc string, paths labplan.Paths) int {
	b, err := os.ReadFile(paths.SupervisorPID())
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 || !processAliveIn(proc, pid) {
		return 0
	}
	cmdline, _ := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "cmdline"))
	if !isSupervisorOf(cmdline, paths.Dir) {
		return 0 // a reused pid, not ours
	}
	return pid
}

func processAlive(pid int) bool { return processAliveIn("/proc", pid) }

func processAliveIn(proc string, pid int) bool {
	b, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "stat"))
	if err != nil {
		return false
	}
	// A zombie (state Z) is dead for our purposes.
	fields := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

// killLabProcesses kills every process that lives in a lab netns, is the lab's
// supervisor or, when own (the lab directory is a lab's), has an argument in the lab
// directory: pods' commands, kubelets, the control plane after a supervisor crash. It
// spares itself and its ancestors (the sudo or shell that ran lab down --dir DIR), and
// a `myelin lab status` beside it (isLabStatus).
func killLabProcesses(paths labplan.Paths, own bool) int {
	labNS := map[uint64]bool{}
	for _, ns := range LeftoverNetNS() {
		if ino, ok := inode(netns.Path(ns)); ok {
			labNS[ino] = true
		}
	}
	spare := ancestors(os.Getpid())
	killed := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || spare[pid] {
			continue
		}
		if !isLabProcess(pid, paths, own, labNS) {
			continue
		}
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed++
		}
	}
	return killed
}

func isLabProcess(pid int, paths labplan.Paths, own bool, labNS map[uint64]bool) bool {
	if ino, ok := inode(fmt.Sprintf("/proc/%d/ns/net", pid)); ok && labNS[ino] {
		return true
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	// A supervisor of any directory: the lab's namespaces and links have fixed names,
	// so this down removes that lab's too, and a supervisor left running would restart
	// its processes in the machine's namespace, their lab links gone.
	_, supervisor := supervisedDir(cmdline)
	return supervisor || own && hasArgIn(cmdline, paths.Dir) && !isLabStatus(cmdline)
}

// isLabStatus says whether cmdline (NUL-separated, from /proc) is `myelin lab status`:
// it names the lab directory but only reads it, and an operator watching the lab go
// down should see it go rather than have the command killed.
func isLabStatus(cmdline []byte) bool {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	lab := slices.Index(args, "lab")
	return filepath.Base(args[0]) == "myelin" && lab > 0 && lab+1 < len(args) && args[lab+1] == "status"
}

// hasArgIn says whether cmdline (NUL-separated, from /proc) has an argument that is
// dir or a path below it, alone or as a flag's value (--data-dir=DIR/etcd): a whole
// argument, not a substring of one (/backup/run/myelin-lab/x, sh -c "… DIR/x"). dir is
// absolute and clean (labplan.CheckDir).
func hasArgIn(cmdline []byte, dir string) bool {
	for _, a := range strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00") {
		if strings.HasPrefix(a, "-") {
			_, a, _ = strings.Cut(a, "=")
		}
		if !filepath.IsAbs(a) {
			continue
		}
		if a = filepath.Clean(a); a == dir || strings.HasPrefix(a, dir+"/") {
			return true
		}
	}
	return false
}

// ancestors returns pid and the processes it descends from.
func ancestors(pid int) map[int]bool {
	out := map[int]bool{}
	for pid > 0 && !out[pid] {
		out[pid] = true
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			break
		}
		pid = parentPID(b)
	}
	return out
}

// parentPID reads the parent's pid from a /proc/PID/stat line (0 if it cannot).
func parentPID(stat []byte) int {
	// "pid (comm) state ppid …": comm may hold spaces and parentheses.
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	if len(fields) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(fields[1])
	return ppid
}

// isSupervisorOf says whether cmdline (NUL-separated, from /proc) is the lab
// supervisor of dir, as lab up starts it (`myelin lab supervise --dir DIR`): found by
// its arguments too, so lab down stops it when its pid file is gone (the directory
// deleted, an up interrupted before the supervisor wrote it). It lives in the
// machine's network namespace, where the lab namespaces' check can't see it.
func isSupervisorOf(cmdline []byte, dir string) bool {
	d, ok := supervisedDir(cmdline)
	return ok && d == dir
}

// supervisedDir says whether cmdline (NUL-separated, from /proc) is a lab supervisor
// (`myelin lab supervise`: the program named myelin, then lab supervise), and the
// --dir it names ("" for none).
func supervisedDir(cmdline []byte) (dir string, ok bool) {
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 3 || filepath.Base(args[0]) != "myelin" || args[1] != "lab" || args[2] != "supervise" {
		return "", false
	}
	lab := 1
	for i, a := range args[lab+2:] {
		if d, ok := strings.CutPrefix(a, "--dir="); ok {
			return d, true
		}
		if a == "--dir" && lab+3+i < len(args) {
			return args[lab+3+i], true
		}
	}
	return "", true
}

func inode(path string) (uint64, bool) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, false
	}
	return st.Ino, true
}

// LeftoverNetNS lists the named network namespaces with the lab's prefix.
func LeftoverNetNS() []string { return netns.Named(labplan.NamePrefix) }

func leftoverRootLinks() []string {
	var out []string
	ifaces, _ := net.Interfaces()
	for _, i := range ifaces {
		if strings.HasPrefix(i.Name, labplan.NamePrefix) {
			out = append(out, i.Name)
		}
	}
	return out
}

// removeBenchLocks removes the lock files killed bench runs left (labplan.BenchLocks);
// a running bench's stays.
func removeBenchLocks(note func(string, ...any)) []string {
	var problems []string
	paths, _ := filepath.Glob(labplan.BenchLocks)
	for _, path := range paths {
		removed, err := lockfile.RemoveIfFree(path)
		switch {
		case err != nil:
			problems = append(problems, fmt.Sprintf("remove the bench lock %s: %v", path, err))
		case removed:
			note("removed %s, left by a bench run that ended without removing it", path)
		}
	}
	return problems
}

// removeNodeDirs removes the lab nodes' pin and state directories, then each base
// directory they were in once it is empty (a base holding anything else is someone
// else's and stays). It returns what it could not remove.
func removeNodeDirs(note func(string, ...any)) []string {
	var problems []string
	for _, dir := range leftoverNodeDirs() {
		if err := os.RemoveAll(dir); err != nil {
			problems = append(problems, err.Error())
			continue
		}
		note("removed %s", dir)
	}
	for _, base := range nodeDirBases {
		if os.Remove(base) == nil { // only when empty
			note("removed %s", base)
		}
	}
	return problems
}

// nodeDirBases are where lab nodes keep their per-node directories.
var nodeDirBases = []string{bpffsDir, nodeRunDir}

// leftoverNodeDirs lists per-node pin and state directories of lab nodes.
func leftoverNodeDirs() []string {
	var out []string
	for _, base := range nodeDirBases {
		entries, _ := os.ReadDir(base)
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), labplan.NodeNSPrefix) {
				out = append(out, filepath.Join(base, e.Name()))
			}
		}
	}
	return out
}

// run runs a command and returns its combined output as the error when it fails.
func run(argv ...string) error {
	out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %s", strings.Join(argv, " "), strings.TrimSpace(string(out)+" "+err.Error()))
	}
	return nil
}
