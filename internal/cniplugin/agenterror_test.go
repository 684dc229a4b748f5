package cniplugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containernetworking/cni/pkg/skel"
	"github.com/containernetworking/cni/pkg/types"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/testenv"
)

// The CNI error of a failed agent call names what failed: an agent that is not ready
// (503), a pod whose NetworkPolicy the agent could not put in place (504), which is
// the agent's doing, not its absence, and a refusal the agent says passes by itself
// (retry: addresses Pods being deleted still hold) are "try again later"; another
// refusal is not.
func TestAgentErrorNamesTheCause(t *testing.T) {
	for _, c := range []struct {
		status int
		retry  bool
		msg    string
		code   uint
		want   string
	}{
		{http.StatusServiceUnavailable, false, "agent starting", types.ErrTryAgainLater, "the myelin agent on this node is not available"},
		{http.StatusGatewayTimeout, false, "NetworkPolicy for pod ns/p is not in place: waited 10s", types.ErrTryAgainLater, "the pod's NetworkPolicy is not in place yet"},
		{http.StatusConflict, true, "no free pod IP on node n1 for ns/p yet", types.ErrTryAgainLater, "register the endpoint is not possible yet"},
		{http.StatusServiceUnavailable, true, "the agent's Pod cache has not synced", types.ErrTryAgainLater, "register the endpoint is not possible yet"},
		{http.StatusConflict, false, "all 2 addresses of 10.244.0.0/30 are in use", types.ErrInternal, "register the endpoint failed"},
	} {
		sock := testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(c.status)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: c.msg, Retry: c.retry})
		})
		_, err := api.NewClient(sock).PutEndpoint(context.Background(), api.Endpoint{PodRef: api.PodRef{ContainerID: "c1"}})
		var ce *types.Error
		if !errors.As(agentError("register the endpoint", sock, err), &ce) {
			t.Fatalf("status %d: agentError(%v) is no CNI error", c.status, err)
		}
		if ce.Code != c.code || !strings.Contains(ce.Msg, c.want) || !strings.Contains(ce.Details, c.msg) {
			t.Errorf("status %d (retry %v): CNI error code %d, %q (%q); want code %d, %q with the agent's message",
				c.status, c.retry, ce.Code, ce.Msg, ce.Details, c.code, c.want)
		}
	}
}

// A GC without the runtime's list of valid attachments never reaches the agent, which
// would remove every endpoint on the node.
func TestGCWithoutValidAttachmentsRemovesNothing(t *testing.T) {
	calls := 0
	sock := testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		calls++
		_ = json.NewEncoder(w).Encode(api.GCResult{})
	})
	conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":%q`, sock)
	err := cmdGC(&skel.CmdArgs{StdinData: []byte(conf + "}")})
	var ce *types.Error
	if !errors.As(err, &ce) || ce.Code != types.ErrInvalidNetworkConfig || calls != 0 {
		t.Errorf("GC without cni.dev/valid-attachments = %v with %d calls to the agent, want code 7 and none", err, calls)
	}
	if err := cmdGC(&skel.CmdArgs{StdinData: []byte(conf + `,"cni.dev/valid-attachments":[]}`)}); err != nil || calls != 1 {
		t.Errorf("GC with an empty list = %v with %d calls to the agent, want success and one", err, calls)
	}
}

// STATUS with an agent that is not there or not ready is "plugin not available"
// (code 50, the spec's for STATUS), naming the socket and how to look at the agent.
func TestAgentDownSaysWhatToDo(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "agent.sock")
	starting := testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(api.Health{Ready: false, Reason: "restoring endpoints"})
	})
	for sock, want := range map[string]string{missing: "no such file or directory", starting: "restoring endpoints"} {
		conf := fmt.Sprintf(`{"cniVersion":"1.1.0","name":"myelin","type":"myelin-cni","socket":%q}`, sock)
		err := cmdStatus(&skel.CmdArgs{StdinData: []byte(conf)})
		var ce *types.Error
		if !errors.As(err, &ce) || ce.Code != types.ErrPluginNotAvailable || !strings.Contains(ce.Details, sock) ||
			!strings.Contains(ce.Details, "myelin status") || !strings.Contains(ce.Details, want) {
			t.Errorf("STATUS with the agent on %s = %v, want code 50 naming the socket, %q and myelin status", sock, err, want)
		}
	}
}
