package cniplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"golang.org/x/sys/unix"

	"github.com/myelin-net/myelin/internal/api"
)

// NetConf is myelin-cni's network configuration.
type NetConf struct {
	types.PluginConf
	// Socket is the agent's API socket on this node.
	Socket string `json:"socket"`
	// MTU is refused: a key other plugins take, which the agent sets for myelin.
	MTU json.RawMessage `json:"mtu,omitempty"`
}

// k8sArgs are the CNI_ARGS a Kubernetes runtime passes.
type k8sArgs struct {
	types.CommonArgs
	K8S_POD_NAMESPACE          types.UnmarshallableString //nolint:revive // CNI's names
	K8S_POD_NAME               types.UnmarshallableString //nolint:revive
	K8S_POD_INFRA_CONTAINER_ID types.UnmarshallableString //nolint:revive
	K8S_POD_UID                types.UnmarshallableString //nolint:revive
}

// maxSocketPath is the longest path a unix socket address holds (sun_path less its
// terminating NUL); the agent cannot listen on a longer one.
var maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// maxQuoted bounds an input quoted in an error, so a huge value gives a short error.
const maxQuoted = 256

// fixConf is what to do about a bad network configuration.
const fixConf = "correct the network configuration the runtime passes (its CNI conf dir; the myelin agent writes 05-myelin.conflist there)"

func invalidConf(format string, a ...any) *types.Error {
	return types.NewError(types.ErrInvalidNetworkConfig, "invalid myelin-cni network configuration",
		fmt.Sprintf(format, a...)+"; "+fixConf)
}

// parseConf reads and checks the network configuration from stdin. Keys it does not
// know are ignored (the runtime adds its own, such as runtimeConfig). "type" is not
// checked: the runtime ran the binary it names (libcni looks "type" up in CNI_PATH),
// so it is the plugin's own, under whatever name it was installed; the spec asks the
// plugin for no check of it.
func parseConf(stdin []byte) (*NetConf, error) {
	c, err := decodeConf(stdin)
	if err == nil {
		err = c.refusedKeys(stdin)
	}
	if err != nil {
		return nil, err
	}
	return c, nil
}

// parseConfDel is parseConf for DEL, which needs only the agent's socket: the
// keys myelin-cni refuses (refusedKeys) are reported on stderr and the pod is
// deleted anyway, or one mistake in the configuration file would keep every
// pod of the node from being deleted.
func parseConfDel(stdin []byte) (*NetConf, error) {
	c, err := decodeConf(stdin)
	if err != nil {
		return nil, err
	}
	if err := c.refusedKeys(stdin); err != nil {
		fmt.Fprintf(os.Stderr, "myelin-cni: DEL: %v; deleting anyway\n", err)
	}
	return c, nil
}

// decodeConf decodes the configuration and checks what every command needs:
// the agent's socket.
func decodeConf(stdin []byte) (*NetConf, error) {
	var c NetConf
	if err := json.Unmarshal(stdin, &c); err != nil {
		return nil, confDecodeError(err)
	}
	network := "network " + quote(c.Name)
	switch {
	case c.Socket == "":
		return nil, invalidConf(`%s: "socket" is missing%s; set it to the myelin agent's socket (default /run/myelin/agent.sock)`,
			network, unknownKeys(stdin))
	case !strings.HasPrefix(c.Socket, "/"):
		return nil, invalidConf(`%s: "socket" %s must be an absolute path`, network, quote(c.Socket))
	case strings.ContainsRune(c.Socket, 0):
		return nil, invalidConf(`%s: "socket" %s contains a NUL character, which no path can`, network, quote(c.Socket))
	case len(c.Socket) > maxSocketPath:
		return nil, invalidConf(`%s: "socket" is %d bytes long, a unix socket's path holds at most %d: %s`,
			network, len(c.Socket), maxSocketPath, quote(c.Socket))
	}
	return &c, nil
}

// refusedKeys refuses the keys other plugins take that the agent decides for
// myelin: "mtu", and "ipam" with anything in it (a type or not).
func (c *NetConf) refusedKeys(stdin []byte) error {
	network := "network " + quote(c.Name)
	switch {
	case len(c.MTU) > 0:
		return invalidConf(`%s: myelin-cni takes no "mtu" (here %s): the agent sets pods' MTU from its own mtu setting `+
			`(ConfigMap myelin-config key mtu, Helm value MTU; 0 detects it from the uplink); remove "mtu"`, network, quote(string(c.MTU)))
	case c.IPAM.Type != "":
		return invalidConf(`%s: myelin-cni takes no "ipam" (here type %s): the myelin agent allocates pod IPs from the node's PodCIDR; remove "ipam"`,
			network, quote(c.IPAM.Type))
	case hasIPAMSettings(stdin):
		return invalidConf(`%s: myelin-cni takes no "ipam" (here without a type): the myelin agent allocates pod IPs from the node's PodCIDR; remove "ipam"`,
			network)
	}
	return nil
}

// hasIPAMSettings says whether stdin's "ipam" (the key matched as encoding/json
// matches it, case-insensitively) is an object with any key.
func hasIPAMSettings(stdin []byte) bool {
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(stdin, &keys)
	for k, v := range keys {
		var settings map[string]json.RawMessage
		if strings.EqualFold(k, "ipam") && json.Unmarshal(v, &settings) == nil && len(settings) > 0 {
			return true
		}
	}
	return false
}

// specKeys are the keys of a plugin's configuration the CNI spec and runtimes use.
var specKeys = map[string]bool{"cniversion": true, "name": true, "type": true, "args": true, "dns": true, "ipam": true,
	"capabilities": true, "runtimeconfig": true, "prevresult": true, validAttachmentsKey: true, "cni.dev/attachments": true,
	"socket": true, "mtu": true}

// unknownKeys lists the top-level keys neither the spec nor myelin-cni knows (a
// misspelt "socket" among them), for the error about a missing key.
func unknownKeys(stdin []byte) string {
	var keys map[string]json.RawMessage
	_ = json.Unmarshal(stdin, &keys)
	var unknown []string
	for k := range keys {
		if !specKeys[strings.ToLower(k)] {
			if len(k) > 40 {
				k = strings.ToValidUTF8(k[:40], "") + "..."
			}
			unknown = append(unknown, fmt.Sprintf("%q", k))
		}
	}
	if len(unknown) == 0 {
		return ""
	}
	slices.Sort(unknown)
	if len(unknown) > 5 {
		unknown = append(unknown[:5], "...")
	}
	return " (keys myelin-cni does not know: " + strings.Join(unknown, ", ") + ")"
}

// confDecodeError names the key of a value of the wrong type, or says the input is
// not JSON at all.
func confDecodeError(err error) *types.Error {
	var typeErr *json.UnmarshalTypeError
	if errors.As(err, &typeErr) && typeErr.Field == "" {
		return invalidConf("the configuration is a JSON %s, it must be an object", typeErr.Value)
	}
	if errors.As(err, &typeErr) {
		// The path names the embedded Go struct, which is no key of the JSON.
		key := strings.TrimPrefix(typeErr.Field, "PluginConf.")
		return invalidConf("%q is a JSON %s, it must be %s", key, typeErr.Value, jsonKind(typeErr.Type))
	}
	return types.NewError(types.ErrDecodingFailure, "invalid myelin-cni network configuration",
		fmt.Sprintf("the configuration is not valid JSON: %v; %s", err, fixConf))
}

// jsonKind says which JSON value decodes into t.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "an array"
	case reflect.Pointer:
		return jsonKind(t.Elem())
	default:
		return "a number"
	}
}

// validAttachmentsKey is the GC's list of attachments the runtime still has.
const validAttachmentsKey = "cni.dev/valid-attachments"

// gcKeep is the container ids a GC keeps: those of the valid attachments the runtime
// lists. The agent removes every other endpoint, so a GC without the list (an
// operator's hand-made call, not a runtime's: libcni sends null or [] for none) is
// refused rather than taken as "keep nothing".
func gcKeep(stdin []byte, c *NetConf) ([]string, error) {
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(stdin, &keys); err != nil {
		return nil, confDecodeError(err)
	}
	if _, ok := keys[validAttachmentsKey]; !ok {
		return nil, invalidConf(`network %s: GC without %q, the attachments still in use, would remove every pod's endpoint on this node; `+
			`a runtime passes the list (empty when no pod is left)`, quote(c.Name), validAttachmentsKey)
	}
	keep := make([]string, 0, len(c.ValidAttachments))
	for _, a := range c.ValidAttachments {
		keep = append(keep, a.ContainerID)
	}
	return keep, nil
}

// parseK8sArgs reads the pod identity from CNI_ARGS; outside Kubernetes they are empty.
func parseK8sArgs(args string) (k8sArgs, error) {
	var a k8sArgs
	if err := types.LoadArgs(args, &a); err != nil {
		return a, types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS",
			fmt.Sprintf("CNI_ARGS %s: %s; CNI_ARGS is KEY=VALUE pairs separated by ';': myelin-cni reads "+
				"K8S_POD_NAMESPACE, K8S_POD_NAME and K8S_POD_UID, and takes other keys only after IgnoreUnknown=1",
				quote(args), clip(err.Error())))
	}
	return a, nil
}

// checkPodIdentity checks what ADD records of the pod: a namespace and a name, or
// (outside Kubernetes) neither.
func checkPodIdentity(a k8sArgs) error {
	if (a.K8S_POD_NAMESPACE == "") == (a.K8S_POD_NAME == "") {
		return nil
	}
	has, lacks := "K8S_POD_NAMESPACE", "K8S_POD_NAME"
	if a.K8S_POD_NAMESPACE == "" {
		has, lacks = lacks, has
	}
	return types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS",
		fmt.Sprintf("CNI_ARGS has %s but no %s; a Kubernetes runtime passes both, other runtimes neither", has, lacks))
}

// checkPodNames checks the pod's identity as the agent does (api.CheckPodNames): a
// Kubernetes runtime passes names, and a value that is none (too long, a newline) is
// refused here, before anything is built, with an error naming the key.
func checkPodNames(a k8sArgs) error {
	err := api.CheckPodNames(string(a.K8S_POD_NAMESPACE), string(a.K8S_POD_NAME), string(a.K8S_POD_UID))
	if err == nil {
		return nil
	}
	return types.NewError(types.ErrInvalidEnvironmentVariables, "invalid CNI_ARGS",
		fmt.Sprintf("CNI_ARGS: %v; check the runtime's CNI invocation", err))
}

// quote quotes an input for an error message, cut to maxQuoted bytes.
func quote(s string) string { return api.QuoteClipped(s, maxQuoted) }

// clip cuts an error text that may quote a huge input.
func clip(s string) string {
	if len(s) <= 2*maxQuoted {
		return s
	}
	return strings.ToValidUTF8(s[:2*maxQuoted], "") + "..."
}
