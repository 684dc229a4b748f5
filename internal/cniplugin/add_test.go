package cniplugin

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"path/filepath"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/ipam"
	"github.com/myelin-net/myelin/internal/netns"
	"github.com/myelin-net/myelin/internal/testenv"
)

// ipamAgent serves the agent's IPAM calls from pool on a unix socket; registering an
// endpoint is refused (an ADD that gets there has nothing to build on).
func ipamAgent(t *testing.T, pool *ipam.Pool) string {
	t.Helper()
	return ipamAgentWith(t, pool, func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusConflict)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: "unexpected register"})
	})
}

// ipamAgentWith is ipamAgent with put answering the endpoint PUT.
func ipamAgentWith(t *testing.T, pool *ipam.Pool, put http.HandlerFunc) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/ipam/{id}", func(w http.ResponseWriter, r *http.Request) {
		ip, err := pool.Allocate(r.PathValue("id"))
		if err != nil {
			w.WriteHeader(http.StatusConflict)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: err.Error()})
			return
		}
		_ = json.NewEncoder(w).Encode(api.Allocation{IP: ip.String(), Gateway: api.PodGateway, MTU: 1500, RouteMTU: 1500,
			HostIfName: api.HostIfName(r.PathValue("id"))})
	})
	mux.HandleFunc("DELETE /v1/ipam/{id}", func(w http.ResponseWriter, r *http.Request) {
		if err := pool.Release(r.PathValue("id")); err != nil {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("PUT /v1/endpoints/{id}", put)
	return testenv.ServeUnixHTTP(t, mux.ServeHTTP)
}

// An ADD whose pod netns is gone by the time the plugin builds the veth (the sandbox
// was torn down mid-way) fails and gives its IP back: nothing leaks.
func TestAddForAVanishedNetnsReleasesTheIP(t *testing.T) {
	pool, err := ipam.OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.244.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	sock := ipamAgent(t, pool)
	args := cniArgs(sock, "ctr-vanished", filepath.Join(t.TempDir(), "netns-gone"))
	if err := cmdAdd(args); err == nil {
		t.Fatal("ADD into a netns that does not exist succeeded")
	}
	if ip, ok := pool.Lookup("ctr-vanished"); ok {
		t.Errorf("the failed ADD still holds %v", ip)
	}
	if _, used, _ := pool.Usage(); used != 0 {
		t.Errorf("%d IPs allocated after the failed ADD", used)
	}
}

// An ADD whose registration outlasts its deadline (an agent stuck in the endpoint
// PUT; here the test ends the ADD's context there) still gives its IP back: the
// release has a deadline of its own (before, it reused the expired one, failed at
// once, and the IP stayed held until a DEL).
func TestPrivilegedAddPastItsDeadlineReleasesTheIP(t *testing.T) {
	requireRoot(t)
	pool, err := ipam.OpenPool(filepath.Join(t.TempDir(), "ipam.json"), netip.MustParsePrefix("10.244.9.0/29"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, expire := context.WithCancel(context.Background())
	defer expire()
	defer func(f func() (context.Context, context.CancelFunc)) { addContext = f }(addContext)
	addContext = func() (context.Context, context.CancelFunc) { return ctx, expire }
	sock := ipamAgentWith(t, pool, func(w http.ResponseWriter, r *http.Request) {
		expire() // the ADD's deadline passes while the agent is stuck here
		<-r.Context().Done()
	})
	host, pod := throwawayNetNS(t, "host"), throwawayNetNS(t, "pod")
	err = netns.Do(host, func() error {
		if err := cmdAdd(cniArgs(sock, "ctr-slow", pod)); err == nil {
			return fmt.Errorf("ADD against an agent stuck in the endpoint PUT succeeded")
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if ip, ok := pool.Lookup("ctr-slow"); ok {
		t.Errorf("the ADD whose deadline passed in the endpoint PUT still holds %v", ip)
	}
}
