package conformance

import (
	"context"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/myelin-net/myelin/internal/images"
	"github.com/myelin-net/myelin/internal/lab"
)

// imageErrors are the waiting reasons of a container whose image the node lacks.
var imageErrors = map[string]bool{"ErrImageNeverPull": true, "ErrImagePull": true, "ImagePullBackOff": true}

// watchImages reports, once per image, every pod waiting for an image the nodes don't
// have (no registry is reachable: only the imported images exist), naming the image and
// how the ones the lab builds are built. stop ends the watch and returns the images.
func watchImages(ctx context.Context, kubeconfig string, out io.Writer) (stop func() []string) {
	ctx, cancel := context.WithCancel(ctx)
	var mu sync.Mutex
	seen := map[string]bool{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		cs, err := lab.Client(kubeconfig) // the lab's: dials only through its link
		if err != nil {
			return
		}
		for ctx.Err() == nil {
			pods, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			for _, p := range podsOrNone(pods, err) {
				for _, c := range append(p.Status.InitContainerStatuses, p.Status.ContainerStatuses...) {
					if c.State.Waiting == nil || !imageErrors[c.State.Waiting.Reason] {
						continue
					}
					mu.Lock()
					if !seen[c.Image] {
						seen[c.Image] = true
						fmt.Fprintf(out, "conformance: image %s is not in the nodes' containerd (pod %s/%s: %s); the lab builds %v under %s with: make setup images (myelin images build --e2e); a test needing another image fails\n",
							c.Image, p.Namespace, p.Name, c.State.Waiting.Reason, images.E2ENames, images.E2ERegistry)
					}
					mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
			case <-time.After(5 * time.Second):
			}
		}
	}()
	return func() []string {
		cancel()
		<-done
		mu.Lock()
		defer mu.Unlock()
		var list []string
		for image := range seen {
			list = append(list, image)
		}
		sort.Strings(list)
		return list
	}
}

func podsOrNone(pods *corev1.PodList, err error) []corev1.Pod {
	if err != nil || pods == nil {
		return nil
	}
	return pods.Items
}
