package agent

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/myelin-net/myelin/internal/api"
)

// The streamed answer decodes to the same api.Services as one built in memory, with
// no frontend and with several.
func TestWriteServicesStreamsValidJSON(t *testing.T) {
	head := api.Services{Node: "n1", ServedBy: "myelin", Algorithm: "random", Synced: true}
	for _, fes := range [][]api.ServiceFrontend{{}, {
		{Service: "default/a", Type: "ClusterIP", Frontend: "10.96.0.1:80/TCP", ID: 1,
			Backends: []api.ServiceBackend{{Address: "10.244.0.5:80", ID: 3, State: "active"}}},
		{Service: "default/b", Port: "dns", Type: "NodePort", Frontend: "198.18.0.11:30053/UDP", ID: 2, Affinity: "1m0s",
			Backends: []api.ServiceBackend{}},
	}} {
		var buf bytes.Buffer
		err := writeServices(&buf, head, func(yield func(api.ServiceFrontend) error) error {
			for _, f := range fes {
				if err := yield(f); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		var got api.Services
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("%s: %v", buf.String(), err)
		}
		want := head
		want.Frontends = fes
		if !reflect.DeepEqual(got, want) {
			t.Errorf("decoded %+v, want %+v", got, want)
		}
	}
}
