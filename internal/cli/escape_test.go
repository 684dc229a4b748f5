package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/testenv"
)

// hostile is agent text that would recolour the terminal, return the cursor and
// forge a line of its own if printed raw.
const hostile = "x\x1b[31m\r\nforged"

// fillStrings sets every string reachable in v (fields, list items, pointed-to
// structs, which it allocates) to hostile, and every list to one item.
func fillStrings(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(hostile)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i))
			}
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fillStrings(v.Elem())
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		fillStrings(v.Index(0))
	}
}

func checkEscaped(t *testing.T, what, out string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("%s prints a control character:\n%q", what, out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "forged") {
			t.Errorf("%s prints a line the agent forged:\n%q", what, out)
		}
	}
	if !strings.Contains(out, `\x1b[31m`) {
		t.Errorf("%s does not show the agent's text escaped:\n%q", what, out)
	}
}

// Everything an agent tells status, policy and health is printed escaped.
func TestAgentTextEscaped(t *testing.T) {
	var st api.Status
	fillStrings(reflect.ValueOf(&st).Elem())
	st.BIGTCP.Enabled, st.BIGTCP.Size = true, 0
	var b bytes.Buffer
	printStatus(&b, st)
	checkEscaped(t, "status", b.String())
	st.BIGTCP.Size, st.Kubernetes.Connected = 65536, true
	b.Reset()
	printStatus(&b, st)
	checkEscaped(t, "status (BIG TCP on, connected)", b.String())

	var ps api.PolicyStatus
	fillStrings(reflect.ValueOf(&ps).Elem())
	for _, synced := range []bool{true, false} {
		ps.Synced = synced
		b.Reset()
		writePolicyStatus(&b, ps)
		checkEscaped(t, "endpoints", b.String())
	}

	var tr api.PolicyTrace
	fillStrings(reflect.ValueOf(&tr).Elem())
	for _, v := range []api.PolicyVerdict{{Isolated: true, Allowed: true, By: []string{hostile}}, {Isolated: true, Isolating: []string{hostile}}} {
		tr.Egress = v
		b.Reset()
		writePolicyTrace(&b, tr)
		checkEscaped(t, "policy trace", b.String())
	}

	var m api.HealthMatrix
	fillStrings(reflect.ValueOf(&m).Elem())
	now := time.Now()
	m.Peers[0].PodHTTP.LastFailure = now.Add(-time.Second)
	b.Reset()
	PrintHealth(&b, m, now)
	checkEscaped(t, "health", b.String())
}

// An agent's error message is printed escaped; errors.Is still sees the error.
func TestAgentErrorEscaped(t *testing.T) {
	err := escapedError{errors.Join(api.ErrNotFound, errors.New(hostile))}
	checkEscaped(t, "error", err.Error())
	if !errors.Is(err, api.ErrNotFound) {
		t.Error("errors.Is no longer sees the agent's error")
	}
}

// An agent socket that answers flows with an error makes observe print that error
// escaped, on stderr and as its result; an error answer past 64 KiB is not read.
func TestObserveAgentErrorEscaped(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "agent.sock")
	lis, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	var body atomic.Value // the handler runs on the server's goroutines
	body.Store(hostile)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: body.Load().(string)})
	})}
	go srv.Serve(lis)
	t.Cleanup(func() { srv.Close() })
	observe := func() string {
		var stdout, stderr bytes.Buffer
		err := Observe(context.Background(), &stdout, ObserveOptions{Socket: sock, Stderr: &stderr, Last: 1})
		if err == nil {
			t.Fatalf("observe of a failing agent succeeded; stderr %q", stderr.String())
		}
		return stderr.String() + err.Error()
	}
	checkEscaped(t, "observe's error", observe())
	body.Store(strings.Repeat("y", 1<<20))
	if out := observe(); len(out) > 4096 || !strings.Contains(out, "500 Internal Server Error") {
		t.Errorf("observe of an agent answering a 1 MiB error: %d bytes printed (%.200q); want the status only", len(out), out)
	}
}

// services, config and monitor print an agent's text escaped too (Service and port
// names, configuration values and warnings, events), and so do its errors.
func TestServicesConfigMonitorEscaped(t *testing.T) {
	var svcs api.Services
	fillStrings(reflect.ValueOf(&svcs).Elem())
	svcs.ServedBy = "myelin"
	var conf api.ConfigView
	fillStrings(reflect.ValueOf(&conf).Elem())
	var ev api.Event
	fillStrings(reflect.ValueOf(&ev).Elem())
	ev.Type = "drop"
	evJSON, _ := json.Marshal(ev)
	answer := func(v any) string {
		return testenv.ServeUnixHTTP(t, func(w http.ResponseWriter, r *http.Request) {
			if v == nil {
				w.WriteHeader(http.StatusConflict)
				_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: hostile})
				return
			}
			if strings.HasPrefix(r.URL.Path, "/v1/monitor") {
				_, _ = w.Write(append(evJSON, '\n'))
				return
			}
			_ = json.NewEncoder(w).Encode(v)
		})
	}
	ctx := context.Background()
	var b bytes.Buffer
	if err := Services(ctx, &b, ServicesOptions{Socket: answer(svcs)}); err != nil {
		t.Fatal(err)
	}
	checkEscaped(t, "services", b.String())
	b.Reset()
	if err := Config(ctx, &b, ConfigOptions{Socket: answer(conf)}); err != nil {
		t.Fatal(err)
	}
	checkEscaped(t, "config", b.String())
	b.Reset()
	if err := Monitor(ctx, &b, MonitorOptions{Socket: answer(struct{}{})}); err != nil {
		t.Fatal(err)
	}
	checkEscaped(t, "monitor", b.String())
	for what, err := range map[string]error{
		"services' error": Services(ctx, &b, ServicesOptions{Socket: answer(nil)}),
		"config's error":  Config(ctx, &b, ConfigOptions{Socket: answer(nil)}),
		"monitor's error": Monitor(ctx, &b, MonitorOptions{Socket: answer(nil)}),
	} {
		if err == nil {
			t.Fatalf("%s: nil", what)
		}
		checkEscaped(t, what, err.Error())
	}
}
