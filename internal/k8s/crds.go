package k8s

import (
	"context"
	"fmt"
	"io/fs"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/myelin-net/myelin/deploy"
)

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// EnsureCRDs creates or updates myelin's CRDs.
func EnsureCRDs(ctx context.Context, dyn dynamic.Interface) error {
	files, err := fs.Glob(deploy.CRDs, "crds/*.yaml")
	if err != nil {
		return err
	}
	for _, f := range files {
		b, err := deploy.CRDs.ReadFile(f)
		if err != nil {
			return err
		}
		var obj map[string]any
		if err := yaml.Unmarshal(b, &obj); err != nil {
			return fmt.Errorf("parse %s: %w", f, err)
		}
		u := &unstructured.Unstructured{Object: obj}
		_, err = dyn.Resource(crdResource).Create(ctx, u, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			cur, gerr := dyn.Resource(crdResource).Get(ctx, u.GetName(), metav1.GetOptions{})
			if gerr != nil {
				return gerr
			}
			u.SetResourceVersion(cur.GetResourceVersion())
			_, err = dyn.Resource(crdResource).Update(ctx, u, metav1.UpdateOptions{})
		}
		if err != nil {
			return fmt.Errorf("install CRD %s: %w", u.GetName(), err)
		}
	}
	return nil
}
