package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/myelin-net/myelin/internal/config"
)

func TestNATPorts(t *testing.T) {
	linux := config.PortRange{Min: 32768, Max: 60999}
	for _, tt := range []struct {
		name            string
		want, ephemeral config.PortRange
		got             config.PortRange
		err             string
	}{
		{"auto: above Linux's default", config.PortRange{}, linux, config.PortRange{Min: 61000, Max: 65535}, ""},
		{"auto: too few above", config.PortRange{}, config.PortRange{Min: 1024, Max: 65000}, config.PortRange{}, "leave fewer than 1024 ports"},
		{"explicit below", config.PortRange{Min: 20000, Max: 29999}, linux, config.PortRange{Min: 20000, Max: 29999}, ""},
		{"explicit overlapping", config.PortRange{Min: 60000, Max: 65535}, linux, config.PortRange{}, "overlaps the node's ephemeral ports 32768-60999"},
	} {
		got, err := natPorts(tt.want, tt.ephemeral)
		if got != tt.got || (err == nil) != (tt.err == "") || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("%s: natPorts = %v, %v; want %v, error containing %q", tt.name, got, err, tt.got, tt.err)
		}
	}
}

func TestReadEphemeralPorts(t *testing.T) {
	dir := t.TempDir()
	for content, want := range map[string]config.PortRange{"32768\t60999\n": {Min: 32768, Max: 60999}, "1 2 3": {}, "9 5": {}} {
		p := filepath.Join(dir, "range")
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := readEphemeralPorts(p)
		if got != want || (err == nil) != !want.IsZero() {
			t.Errorf("readEphemeralPorts(%q) = %v, %v; want %v", content, got, err, want)
		}
	}
}
