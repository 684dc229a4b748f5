package api

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"syscall"
	"time"

	"github.com/myelin-net/myelin/internal/statefile"
)

// HostIfName is the name of a pod's host-side veth: "myl" and 11 hex characters of a
// hash of the container id (15 characters, the kernel's limit). The plugin can find a
// pod's veth from its container id alone, without the agent.
func HostIfName(containerID string) string {
	sum := sha256.Sum256([]byte(containerID))
	return "myl" + hex.EncodeToString(sum[:])[:11]
}

// hostIfNamePattern is what HostIfName returns.
var hostIfNamePattern = regexp.MustCompile(`^myl[0-9a-f]{11}$`)

// IsHostIfName reports whether name is shaped like a pod's host veth (HostIfName).
func IsHostIfName(name string) bool { return hostIfNamePattern.MatchString(name) }

// ErrNotOwner is returned when a delete names an endpoint whose record belongs to
// another attachment (another host veth) than the caller's.
var ErrNotOwner = errors.New("not the endpoint's owner")

// DeletedEndpoint is what CNI DEL leaves for the agent when it could not reach it: the
// plugin has removed the pod's veth (and with it its /32 route); the agent, when it
// runs again, removes the endpoint (map entry, record) and releases its IP, if the
// record is still this attachment's (same host veth index) and its veth is gone.
type DeletedEndpoint struct {
	ContainerID string    `json:"containerID"`
	Namespace   string    `json:"namespace,omitempty"`
	Pod         string    `json:"pod,omitempty"`
	HostIfName  string    `json:"hostIfName"`
	HostIfIndex int       `json:"hostIfIndex"` // 0: the veth was already gone
	Deleted     time.Time `json:"deleted"`
	// DeletedBoot is Deleted on CLOCK_BOOTTIME (unknown in an older plugin's record).
	DeletedBoot BootTime `json:"deletedBoot,omitzero"`
}

// DeletedDir is where CNI DEL leaves DeletedEndpoint records: next to the agent's
// socket, in its state directory.
func DeletedDir(socket string) string { return filepath.Join(filepath.Dir(socket), "cni-deleted") }

// containerIDPattern is what CNI allows in a container id; it also keeps ids safe as
// file names. A pod's namespace, name and UID are of it too (CheckPodNames): none can
// break a log line, a file name or a metric label.
var containerIDPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.\-]*$`)

// CheckContainerID returns an error for an id that is not a CNI container id
// (letters, digits, '_', '.', '-', starting with a letter or digit). The agent keys
// files by container id, so an id such as "../x" must never reach it.
func CheckContainerID(id string) error {
	if !containerIDPattern.MatchString(id) {
		return fmt.Errorf("container id %s is not a CNI container id (letters, digits, '_', '.', '-', starting with a letter or digit)", clipQuote(id))
	}
	return nil
}

// RecordFileName is the name of the file of a record kept per container (a
// recorded delete, an endpoint record): the id and ".json", as every version wrote
// it, so an agent rolled back to an older version still reads its records; an id
// too long for that (the CNI spec sets no length limit, the file system takes 255
// bytes, and older versions' statefile added ".tmp") is named by its hex sha256
// instead, which no older version could record anyway. The record itself names the
// container.
func RecordFileName(containerID string) string {
	if len(containerID)+len(".json.tmp") <= maxFileName {
		return containerID + ".json"
	}
	sum := sha256.Sum256([]byte(containerID))
	return hex.EncodeToString(sum[:]) + ".json"
}

// maxFileName is the longest file name Linux file systems take (NAME_MAX).
const maxFileName = 255

// DeletedPath is the file of containerID's record in dir (RecordFileName).
func DeletedPath(dir, containerID string) string {
	return filepath.Join(dir, RecordFileName(containerID))
}

// MaxDeletedRecords bounds the records in DeletedDir: while no agent carries them
// out, each DEL of a new container id (a runtime's DEL of every sandbox whose ADD
// failed, the agent being down) leaves one, in the node's memory (/run is a tmpfs).
// Hours of an agent down on a busy node leave a few thousand.
const MaxDeletedRecords = 65536

// WriteDeleted records d in dir (atomically: a reader never sees half a record). A
// repeated DEL, which finds no veth (HostIfIndex 0), keeps the record of the first;
// otherwise the new record replaces it. A new record past MaxDeletedRecords is
// refused, which fails the DEL: the runtime retries it, until an agent answers.
func WriteDeleted(dir string, d DeletedEndpoint) error {
	return writeDeleted(dir, d, MaxDeletedRecords)
}

func writeDeleted(dir string, d DeletedEndpoint, max int) error {
	if err := CheckContainerID(d.ContainerID); err != nil {
		return fmt.Errorf("record deleted endpoint: %w", err)
	}
	if err := statefile.PrivateDir(dir); err != nil {
		return fmt.Errorf("record deleted endpoint: %w", err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		return err
	}
	path := DeletedPath(dir, d.ContainerID)
	_, err = os.Lstat(path)
	if d.HostIfIndex == 0 && (err == nil || claimed(path)) {
		return nil
	}
	if os.IsNotExist(err) {
		n, err := countRecords(dir, max)
		if err != nil {
			return fmt.Errorf("record deleted endpoint: count the records: %w", err)
		}
		if n >= max {
			return fmt.Errorf("record deleted endpoint %s: %s holds %d records, at most %d: start the myelin agent, "+
				"which carries them out, or remove the records of containers the runtime no longer has", d.ContainerID, dir, n, max)
		}
	}
	if err := statefile.Write(path, b, 0o600); err != nil {
		return fmt.Errorf("record deleted endpoint: %w", err)
	}
	return nil
}

// countRecords is how many records dir holds, counted up to max.
func countRecords(dir string, max int) (int, error) {
	f, err := os.Open(dir)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n := 0
	for {
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			if ext := filepath.Ext(name); ext == ".json" || ext == claimedExt {
				n++
			}
		}
		if err == io.EOF || n >= max {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// claimedExt ends the name of a record the agent has claimed (ClaimDeleted): the
// plugin never writes a file of that name, so it can't replace a record the agent
// is carrying out.
const claimedExt = ".claimed"

// claimed reports whether the record at path is claimed by the agent.
func claimed(path string) bool {
	_, err := os.Lstat(path + claimedExt)
	return err == nil
}

// ReadDeleted returns the records in dir with their paths, whatever their file's name
// (the record names its container); none if dir does not exist. A record that can't
// be parsed is returned as an error naming its file.
func ReadDeleted(dir string) (map[string]DeletedEndpoint, error) {
	return readDeleted(dir, ".json")
}

// ClaimDeleted claims the records in dir for the agent, which carries them out and
// then removes their claimed files: it renames each <name>.json to
// <name>.json.claimed and returns the claimed records with their paths, those of
// earlier rounds too (a failed carry-out or a crash left them). Claiming first means
// a record the plugin writes while the agent carries out an earlier one of the same
// container lands in a new <name>.json, read the next round, instead of being removed
// with the earlier one. A <name>.json whose earlier claim is still there waits for
// the round after that claim is carried out. Records that can't be parsed are handled
// as ReadDeleted does. The agent must be the only claimer.
func ClaimDeleted(dir string) (map[string]DeletedEndpoint, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if claimed(path) {
			continue
		}
		if err := os.Rename(path, path+claimedExt); err != nil && !os.IsNotExist(err) {
			errs = append(errs, fmt.Errorf("claim deleted-endpoint record %s: %w", path, err))
		}
	}
	recs, err := readDeleted(dir, claimedExt)
	return recs, errors.Join(append(errs, err)...)
}

// readDeleted returns the records in dir of the files whose names end in ext.
func readDeleted(dir, ext string) (map[string]DeletedEndpoint, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := map[string]DeletedEndpoint{}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ext {
			continue
		}
		path := filepath.Join(dir, e.Name())
		if !e.Type().IsRegular() {
			errs = append(errs, setAsideDeleted(path, fmt.Errorf("a %v, not a file the plugin wrote", e.Type())))
			continue
		}
		b, err := readRecord(path)
		if errors.Is(err, errRecordSize) {
			errs = append(errs, setAsideDeleted(path, err))
			continue
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var d DeletedEndpoint
		err = json.Unmarshal(b, &d)
		if err == nil {
			err = CheckContainerID(d.ContainerID)
		}
		if err != nil {
			errs = append(errs, setAsideDeleted(path, err))
			continue
		}
		out[path] = d
	}
	return out, errors.Join(errs...)
}

// maxDeletedRecord bounds what ReadDeleted reads of a record: the plugin's are a few
// hundred bytes, and a container id, the one field without a bound of its own, comes
// in an environment variable (at most 128 KiB on Linux).
const maxDeletedRecord = 1 << 20

var errRecordSize = fmt.Errorf("larger than %d bytes, more than any record the plugin writes", maxDeletedRecord)

// readRecord reads a record file without following a symlink (one planted in its
// place since the directory was listed) and at most maxDeletedRecord bytes of it.
func readRecord(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxDeletedRecord+1))
	if err == nil && len(b) > maxDeletedRecord {
		err = errRecordSize
	}
	return b, err
}

// setAsideDeleted moves a deleted-endpoint record that can't be carried out to
// path+".corrupt", where ReadDeleted no longer reads it (it was reported every round,
// for good), and returns the error saying so once.
func setAsideDeleted(path string, why error) error {
	aside := path + ".corrupt"
	if err := os.Rename(path, aside); err != nil {
		return fmt.Errorf("deleted-endpoint record %s is not valid (%v) and can't be moved aside (%v): remove it", path, why, err)
	}
	return fmt.Errorf("deleted-endpoint record %s is not valid (%v): moved to %s; the runtime's CNI GC releases its pod's IP", path, why, aside)
}

// EndpointCheck is the agent's verdict on an endpoint's datapath state (CNI CHECK):
// each problem says what is wrong; none means the datapath serves the pod.
type EndpointCheck struct {
	Problems []string `json:"problems"`
}
