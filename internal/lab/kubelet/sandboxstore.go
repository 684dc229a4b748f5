package kubelet

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
)

func writeSandbox(dir string, sb *sandbox) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, err := json.Marshal(sb)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, sb.UID+".json")
	if err := os.WriteFile(path+".tmp", b, 0o644); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

func loadSandbox(dir, uid string) *sandbox {
	b, err := os.ReadFile(filepath.Join(dir, uid+".json"))
	if err != nil {
		return nil
	}
	var sb sandbox
	if json.Unmarshal(b, &sb) != nil {
		return nil
	}
	return &sb
}

func loadSandboxes(dir string) []*sandbox {
	var out []*sandbox
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if uid, ok := strings.CutSuffix(e.Name(), ".json"); ok {
			if sb := loadSandbox(dir, uid); sb != nil {
				out = append(out, sb)
			}
		}
	}
	return out
}
