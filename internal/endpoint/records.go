package endpoint

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/myelin-net/myelin/internal/api"
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
	path := recordPath(dir, ep.ContainerID)
	if err := os.WriteFile(path+".tmp", b, 0o600); err != nil {
		return fmt.Errorf("write endpoint record: %w", err)
	}
	return os.Rename(path+".tmp", path)
}

func removeRecord(dir, containerID string) error {
	if err := os.Remove(recordPath(dir, containerID)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}

func readRecords(dir string) ([]*api.Endpoint, error) {
	entries, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []*api.Endpoint
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		var ep api.Endpoint
		if err := json.Unmarshal(b, &ep); err != nil {
			return nil, fmt.Errorf("endpoint record %s: %w", e.Name(), err)
		}
		out = append(out, &ep)
	}
	return out, nil
}
