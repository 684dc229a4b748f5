package cniplugin

import (
	"fmt"
	"strings"

	"github.com/containernetworking/cni/pkg/types"
	"github.com/containernetworking/cni/pkg/utils"
)

// supportedVersions are the CNI versions myelin-cni speaks.
var supportedVersions = []string{"1.0.0", "1.1.0"}

// requiredEnv are the variables skel requires of each command.
var requiredEnv = map[string][]string{
	"ADD":    {"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"},
	"CHECK":  {"CNI_CONTAINERID", "CNI_NETNS", "CNI_IFNAME", "CNI_PATH"},
	"DEL":    {"CNI_CONTAINERID", "CNI_IFNAME", "CNI_PATH"},
	"GC":     {"CNI_PATH"},
	"STATUS": {"CNI_PATH"},
}

// checkEnv checks the CNI_* variables as skel does, before it, for an error that names
// the variable, its value and what it must be (skel's say neither which variable nor
// what to do). Without CNI_COMMAND, and for VERSION, skel answers alone (what the
// plugin is, the versions it speaks).
func checkEnv(getenv func(string) string) *types.Error {
	cmd := getenv("CNI_COMMAND")
	if cmd == "" || cmd == "VERSION" {
		return nil
	}
	required, ok := requiredEnv[cmd]
	if !ok {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "unknown CNI_COMMAND",
			fmt.Sprintf("CNI_COMMAND %s is none of ADD, DEL, CHECK, GC, STATUS and VERSION; check the runtime's CNI invocation", quote(cmd)))
	}
	var missing []string
	for _, name := range required {
		if getenv(name) == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return types.NewError(types.ErrInvalidEnvironmentVariables, "required CNI environment variables missing",
			fmt.Sprintf("%s needs %s; a container runtime sets them (CNI spec, Parameters): to run myelin-cni by hand, set each",
				cmd, strings.Join(missing, ", ")))
	}
	if cmd == "GC" || cmd == "STATUS" {
		return nil
	}
	id := getenv("CNI_CONTAINERID")
	if e := utils.ValidateContainerID(id); e != nil {
		return types.NewError(e.Code, "invalid CNI_CONTAINERID",
			fmt.Sprintf("CNI_CONTAINERID %s: %s; a container id is letters, digits, '_', '.' and '-', starting with a letter or digit",
				quote(id), e.Msg))
	}
	name := getenv("CNI_IFNAME")
	if e := utils.ValidateInterfaceName(name); e != nil {
		return types.NewError(e.Code, "invalid CNI_IFNAME",
			fmt.Sprintf("CNI_IFNAME %s: %s; an interface name is 1 to 15 bytes, not . or .., without '/', ':' or white space (Kubernetes pods get eth0): check the runtime's CNI invocation",
				quote(name), e.Msg))
	}
	return nil
}

// explain completes an error skel made before or around the plugin's own code, which
// has no details or none saying what to do. The plugin's own errors are left alone.
func explain(e *types.Error) *types.Error {
	if e == nil {
		return nil
	}
	switch {
	case e.Code == types.ErrIncompatibleCNIVersion:
		e.Details = strings.TrimPrefix(e.Details+"; ", "; ") + fmt.Sprintf(
			`myelin-cni speaks CNI %s (CHECK needs 0.4.0 or later, GC and STATUS 1.1.0): set "cniVersion" in the network configuration `+
				"to one of them (the agent's conflist takes it from --cni-version, Helm value cni.version)", strings.Join(supportedVersions, " and "))
	case e.Details == "" && (e.Code == types.ErrDecodingFailure || e.Code == types.ErrInvalidNetworkConfig):
		e.Details = e.Msg + "; " + fixConf
	case e.Details == "":
		e.Details = e.Msg + "; check the runtime's CNI invocation"
	}
	return e
}
