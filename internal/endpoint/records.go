package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/statefile"
)

// recordPath is the file of containerID's endpoint record in dir
// (api.RecordFileName: the id, or the hash of one too long for a file name); the
// record itself names the container.
func recordPath(dir, containerID string) string {
	return filepath.Join(dir, api.RecordFileName(containerID))
}

func writeRecord(dir string, ep *api.Endpoint) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.MarshalIndent(ep, "", "  ")
	if err != nil {
		return err
	}
	if err := statefile.Write(recordPath(dir, ep.ContainerID), b, 0o600); err != nil {
		return fmt.Errorf("write endpoint record: %w", err)
	}
	return nil
}

func removeRecord(dir, containerID string) error {
	if err := os.Remove(recordPath(dir, containerID)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

// readRecords reads the endpoint records in dir, in the order of their files'
// names. A record that can't be read or parsed, whose pod reference api.CheckPodRef
// refuses (an older version's), or that is not in its container's
// file, or that names another veth than its container's (which a delete would
// detach), does not stop the others: its file's name is in unreadable
// (Manager.recordUnreadable finds its container) and the error names the file.
func readRecords(dir string) (records []*api.Endpoint, unreadable []string, err error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("read endpoint records: %w", err)
	}
	var errs []error
	for _, e := range entries {
		if e.IsDir() || filepath.Ext(e.Name()) != ".json" {
			continue
		}
		ep, err := readRecord(filepath.Join(dir, e.Name()))
		if err != nil {
			unreadable = append(unreadable, e.Name())
			errs = append(errs, err)
			continue
		}
		records = append(records, ep)
	}
	return records, unreadable, errors.Join(errs...)
}

// readRecord reads the record at path, which must be its container's file.
func readRecord(path string) (*api.Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("endpoint record %s: %w", path, err)
	}
	var ep api.Endpoint
	if err := json.Unmarshal(b, &ep); err != nil {
		return nil, fmt.Errorf("endpoint record %s is corrupt (%w); its container keeps its IP until CNI DEL or GC removes it", path, err)
	}
	// The pod reference as the API checks it now: a record an older version wrote
	// may hold a name that would break the log lines, Events and files it goes into.
	if err := api.CheckPodRef(ep.PodRef); err != nil {
		return nil, fmt.Errorf("endpoint record %s: %w; its container keeps its IP until CNI DEL or GC removes it", path, err)
	}
	if name := filepath.Base(path); name != api.RecordFileName(ep.ContainerID) {
		return nil, fmt.Errorf("endpoint record %s names container %q, whose record is %s; its container keeps its IP until CNI DEL or GC removes it",
			path, ep.ContainerID, api.RecordFileName(ep.ContainerID))
	}
	if ep.HostIfName != HostIfName(ep.ContainerID) {
		return nil, fmt.Errorf("endpoint record %s names host veth %q, not its container's %s; its container keeps its IP until CNI DEL or GC removes it",
			path, ep.HostIfName, HostIfName(ep.ContainerID))
	}
	return &ep, nil
}
