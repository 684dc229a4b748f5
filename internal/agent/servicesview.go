package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"

	"github.com/myelin-net/myelin/internal/api"
	"github.com/myelin-net/myelin/internal/service"
)

// writeServices writes GET /v1/services's answer to w as api.Services JSON,
// frontend by frontend, never holding the whole answer: with 10,000 Services of 10
// backends it is ~10 MiB of JSON and ~30 MiB of Go values, which the agent's RSS
// would otherwise keep after every request. head gives every field but Frontends;
// each calls its function with every frontend in order.
func writeServices(w io.Writer, head api.Services, each func(func(api.ServiceFrontend) error) error) error {
	head.Frontends = []api.ServiceFrontend{}
	b, err := json.Marshal(head)
	if err != nil {
		return err
	}
	// Frontends is the last field: the head is written up to its empty array's "]".
	prefix, ok := bytes.CutSuffix(b, []byte("[]}"))
	if !ok {
		return fmt.Errorf("encode services: unexpected head %s", b)
	}
	bw := bufio.NewWriterSize(w, 32<<10)
	bw.Write(prefix)
	bw.WriteByte('[')
	enc := json.NewEncoder(bw)
	first := true
	err = each(func(f api.ServiceFrontend) error {
		if !first {
			bw.WriteByte(',')
		}
		first = false
		return enc.Encode(f) // its newline is JSON whitespace
	})
	if err != nil {
		return err
	}
	bw.WriteString("]}\n")
	return bw.Flush()
}

// frontendView is the API view of one programmed frontend; backends maps its ids to
// addresses.
func frontendView(f service.Applied, backends map[uint32]service.Backend) api.ServiceFrontend {
	v := api.ServiceFrontend{Service: f.Service, Port: f.PortName, Type: string(f.Type),
		Frontend: service.FrontendString(f.Key), ID: f.ID, Backends: make([]api.ServiceBackend, 0, len(f.Active)+len(f.Terminating))}
	if f.Affinity > 0 {
		v.Affinity = f.Affinity.String()
	}
	if f.ExternalLocal {
		v.ExternalTrafficPolicy = "Local"
	}
	for i, id := range f.Active {
		v.Backends = append(v.Backends, api.ServiceBackend{Address: backends[id].String(), ID: id, State: "active",
			Local: f.ExternalLocal && i < f.Local})
	}
	for _, id := range f.Terminating {
		v.Backends = append(v.Backends, api.ServiceBackend{Address: backends[id].String(), ID: id, State: "terminating"})
	}
	return v
}
