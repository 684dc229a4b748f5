package endpoint

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/statefile"
)

func recordPath(dir, containerID string) string {
	return filepath.Join(dir, containerID+".json")
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

// readRecords reads the endpoint records in dir. A record that can't be read or
// parsed, or that names another container than its file or another veth than its
// container's (which a delete would detach), does not stop the others:
// its container id (the file's name) is in unreadable and the error names the file.
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
		id, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		ep, err := readRecord(filepath.Join(dir, e.Name()), id)
		if err != nil {
			unreadable = append(unreadable, id)
			errs = append(errs, err)
			continue
		}
		records = append(records, ep)
	}
	return records, unreadable, errors.Join(errs...)
}

func readRecord(path, containerID string) (*api.Endpoint, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("endpoint record %s: %w", path, err)
	}
	var ep api.Endpoint
	if err := json.Unmarshal(b, &ep); err != nil {
		return nil, fmt.Errorf("endpoint record %s is corrupt (%w); its container keeps its IP until CNI DEL or GC removes it", path, err)
	}
	if ep.ContainerID != containerID {
		return nil, fmt.Errorf("endpoint record %s names container %q, not %q; its container keeps its IP until CNI DEL or GC removes it",
			path, ep.ContainerID, containerID)
	}
	if ep.HostIfName != HostIfName(containerID) {
		return nil, fmt.Errorf("endpoint record %s names host veth %q, not its container's %s; its container keeps its IP until CNI DEL or GC removes it",
			path, ep.HostIfName, HostIfName(containerID))
	}
	return &ep, nil
}
