package api

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"
)

// ErrUnavailable means the agent could not be reached or is not ready; callers such as
// the CNI plugin turn it into "try again later".
var ErrUnavailable = errors.New("myelin agent unavailable")

// ErrNotAdmitted means the agent is up but could not put a new pod's NetworkPolicy in
// place in time (PUT /v1/endpoints answers 504); the endpoint was removed again, and
// the CNI plugin turns it into "try again later" naming the policy, not the agent.
var ErrNotAdmitted = errors.New("pod's NetworkPolicy not in place")

// ErrRetry means the agent refused for now, for a reason that passes by itself and
// that its message names (ErrorBody.Retry); the CNI plugin turns it into "try again
// later" with that message, not "agent unavailable".
var ErrRetry = errors.New("not possible yet")

// Client talks to one agent over its unix socket.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient returns a client for the agent listening on socket.
func NewClient(socket string) *Client {
	return &Client{
		socket: socket,
		http: &http.Client{Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
		}},
	}
}

// Socket is the path the client dials.
func (c *Client) Socket() string { return c.socket }

func (c *Client) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://agent"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %s: %v", ErrUnavailable, c.socket, unwrapDial(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var eb ErrorBody
		if json.NewDecoder(io.LimitReader(resp.Body, errorBodyMax)).Decode(&eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("%s %s: %s, without the agent's error message (is it the myelin agent on %s?)", method, path, resp.Status, c.socket)
		}
		if eb.Retry {
			return fmt.Errorf("%w: %s", ErrRetry, eb.Error)
		}
		if resp.StatusCode == http.StatusServiceUnavailable {
			return fmt.Errorf("%w: %s", ErrUnavailable, eb.Error)
		}
		if resp.StatusCode == http.StatusGatewayTimeout {
			return fmt.Errorf("%w: %s", ErrNotAdmitted, eb.Error)
		}
		if resp.StatusCode == http.StatusNotFound {
			return fmt.Errorf("%w: %s", ErrNotFound, eb.Error)
		}
		if resp.StatusCode == http.StatusPreconditionFailed {
			return fmt.Errorf("%w: %s", ErrNotOwner, eb.Error)
		}
		return errors.New(eb.Error)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("read the answer to %s %s from %s (is it the myelin agent?): %w", method, path, c.socket, err)
	}
	return nil
}

// errorBodyMax bounds the agent's error answer read: what answers on the socket is
// not trusted to end it (a line for the terminal, not a megabyte).
const errorBodyMax = 64 << 10

// ErrNotFound is returned for an endpoint the agent does not know.
var ErrNotFound = errors.New("not found")

func unwrapDial(err error) error {
	var op *net.OpError
	if errors.As(err, &op) {
		return op
	}
	return err
}

// Health asks whether the agent is ready.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	err := c.do(ctx, http.MethodGet, "/healthz", nil, &h)
	return h, err
}

// Allocate reserves an IP for a pod attachment (idempotent per container id).
func (c *Client) Allocate(ctx context.Context, ref PodRef) (Allocation, error) {
	var a Allocation
	err := c.do(ctx, http.MethodPost, "/v1/ipam/"+url.PathEscape(ref.ContainerID), ref, &a)
	return a, err
}

// Release gives back the IP a failed ADD was allocated (attempt: its
// Allocation.Attempt); the agent keeps it while another ADD of the container id is in
// flight or its endpoint is registered. Releasing nothing is not an error.
func (c *Client) Release(ctx context.Context, containerID, attempt string) error {
	path := "/v1/ipam/" + url.PathEscape(containerID)
	if attempt != "" {
		path += "?attempt=" + url.QueryEscape(attempt)
	}
	return c.do(ctx, http.MethodDelete, path, nil, nil)
}

// PutEndpoint registers an endpoint and programs the datapath for it.
func (c *Client) PutEndpoint(ctx context.Context, ep Endpoint) (Endpoint, error) {
	var out Endpoint
	err := c.do(ctx, http.MethodPut, "/v1/endpoints/"+url.PathEscape(ep.ContainerID), ep, &out)
	return out, err
}

// GetEndpoint returns one endpoint (ErrNotFound if unknown).
func (c *Client) GetEndpoint(ctx context.Context, containerID string) (Endpoint, error) {
	var out Endpoint
	err := c.do(ctx, http.MethodGet, "/v1/endpoints/"+url.PathEscape(containerID), nil, &out)
	return out, err
}

// DeleteEndpoint removes an endpoint and releases its IP; deleting nothing succeeds.
func (c *Client) DeleteEndpoint(ctx context.Context, containerID string) error {
	return c.do(ctx, http.MethodDelete, "/v1/endpoints/"+url.PathEscape(containerID), nil, nil)
}

// DeleteEndpointOf is DeleteEndpoint for a caller that saw the endpoint's host veth
// at ifindex (0: none) and deletes the attachment of the container's interface
// ifName ("": any): an endpoint recorded on another veth or interface is not
// deleted (ErrNotOwner).
func (c *Client) DeleteEndpointOf(ctx context.Context, containerID string, ifindex int, ifName string) error {
	q := url.Values{"ifindex": {strconv.Itoa(ifindex)}}
	if ifName != "" {
		q.Set("ifname", ifName)
	}
	return c.do(ctx, http.MethodDelete, "/v1/endpoints/"+url.PathEscape(containerID)+"?"+q.Encode(), nil, nil)
}

// CheckEndpoint asks the agent what is wrong with an endpoint's datapath state (its
// map entry and the programs on its veth); ErrNotFound if unknown.
func (c *Client) CheckEndpoint(ctx context.Context, containerID string) (EndpointCheck, error) {
	var out EndpointCheck
	err := c.do(ctx, http.MethodGet, "/v1/endpoints/"+url.PathEscape(containerID)+"/check", nil, &out)
	return out, err
}

// Endpoints lists all endpoints.
func (c *Client) Endpoints(ctx context.Context) ([]Endpoint, error) {
	var out []Endpoint
	err := c.do(ctx, http.MethodGet, "/v1/endpoints", nil, &out)
	return out, err
}

// GC removes every endpoint whose container id is not in keep.
func (c *Client) GC(ctx context.Context, keep []string) (GCResult, error) {
	var out GCResult
	err := c.do(ctx, http.MethodPost, "/v1/gc", GCRequest{Keep: keep}, &out)
	return out, err
}

// Status returns the node's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var out Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, &out)
	return out, err
}

// Services returns the Service frontends programmed on the node.
func (c *Client) Services(ctx context.Context) (Services, error) {
	var out Services
	err := c.do(ctx, http.MethodGet, "/v1/services", nil, &out)
	return out, err
}

// Config returns the node's effective configuration.
func (c *Client) Config(ctx context.Context) (ConfigView, error) {
	var out ConfigView
	err := c.do(ctx, http.MethodGet, "/v1/config", nil, &out)
	return out, err
}

// Monitor streams datapath events of the given type ("drop", "trace" or "" for all)
// to fn until ctx ends or fn returns an error.
func (c *Client) Monitor(ctx context.Context, typ string, fn func(Event) error) error {
	resp, err := c.stream(ctx, "/v1/monitor?type="+url.QueryEscape(typ))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		var ev Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("decode monitor event: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	return sc.Err()
}

// DefaultTimeout bounds one API call from the CLI or the plugin.
const DefaultTimeout = 30 * time.Second

// stream opens a long-lived GET (no client timeout) of path; a non-200 answer is the
// agent's error. The caller closes the body.
func (c *Client) stream(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://agent"+path, nil)
	if err != nil {
		return nil, err
	}
	httpc := *c.http
	httpc.Timeout = 0
	resp, err := httpc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrUnavailable, c.socket, unwrapDial(err))
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		var eb ErrorBody
		if json.NewDecoder(io.LimitReader(resp.Body, errorBodyMax)).Decode(&eb) != nil || eb.Error == "" {
			eb.Error = fmt.Sprintf("%s: %s", req.URL.Path, resp.Status) // no error body from the agent
		}
		return nil, errors.New(eb.Error)
	}
	return resp, nil
}
