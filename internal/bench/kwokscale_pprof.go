package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"github.com/myelin-net/myelin/internal/api"
)

// saveAgentProfile fetches the agent's /debug/pprof/<what> (query: e.g. "seconds=20")
// over its socket into file in the output directory, for `go tool pprof`.
func (r *kwokRun) saveAgentProfile(ctx context.Context, what, query, file string) error {
	sock := api.NodeSocket(r.node)
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	url := "http://agent/debug/pprof/" + what
	if query != "" {
		url += "?" + query
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := c.Do(req)
	if err != nil {
		return fmt.Errorf("profile %s of the agent: %w", what, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile %s of the agent: %s", what, resp.Status)
	}
	f, err := os.Create(filepath.Join(r.out, file))
	if err != nil {
		return err
	}
	_, err = io.Copy(f, resp.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
