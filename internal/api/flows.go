package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/url"

	"github.com/myelin-net/myelin/internal/flow"
)

// maxFlowLine bounds one JSON line of GET /v1/flows (a flow with DNS answers and labels).
const maxFlowLine = 1 << 20

// Flows streams the agent's flows for query (flowclient.Query) to fn until the agent
// has sent what was asked, ctx ends, or fn returns an error.
func (c *Client) Flows(ctx context.Context, query url.Values, fn func(*flow.Flow) error) error {
	resp, err := c.stream(ctx, "/v1/flows?"+query.Encode())
	if err != nil {
		return err
	}
	defer resp.Body.Close()
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
