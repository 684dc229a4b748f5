package agent

import (
	"errors"
	"net/url"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The agent retries reading its configuration while the apiserver is unreachable or
// overloaded, and stops at once when it is forbidden or finds nothing.
func TestIsTransient(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"connection refused", &url.Error{Op: "Get", Err: syscall.ECONNREFUSED}, true},
		{"host unreachable", &url.Error{Op: "Get", Err: syscall.EHOSTUNREACH}, true},
		{"service unavailable", apierrors.NewServiceUnavailable("starting"), true},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), true},
		{"forbidden", apierrors.NewForbidden(gr, "myelin-config", errors.New("no")), false},
		{"not found", apierrors.NewNotFound(gr, "myelin-config"), false},
		{"bad value", errors.New(`key "routing-mode" value "x"`), false},
	} {
		if got := isTransient(tc.err); got != tc.want {
			t.Errorf("%s: isTransient = %v, want %v", tc.name, got, tc.want)
		}
	}
}
