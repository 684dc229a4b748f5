package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/myelin-net/myelin/internal/flow"
)

// maxFlowLine bounds one JSON line of GET /v1/flows (a flow with DNS answers and labels).
const maxFlowLine = 1 << 20

// Flows streams the agent's flows for query (flowclient.Query) to fn until the agent
// has sent what was asked, ctx ends, or fn returns an error.
func (c *Client) Flows(ctx context.Context, query url.Values, fn func(*flow.Flow) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent/v1/flows?"+query.Encode(), nil)
	if err != nil {
		return err
	}
	httpc := *c.http
	httpc.Timeout = 0
	resp, err := httpc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, c.socket, unwrapDial(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var eb ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		return errors.New(eb.Error)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), maxFlowLine)
	for sc.Scan() {
		f := new(flow.Flow)
		if err := json.Unmarshal(sc.Bytes(), f); err != nil {
			return fmt.Errorf("decode flow from %s: %w", c.socket, err)
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}
