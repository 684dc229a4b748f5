// Package browsertest drives a real headless browser (Debian's chromium, over the
// Chrome DevTools Protocol with chromedp) for the service map's tests: the unit test
// in internal/ui and the lab test in test/e2e. Without chromium a test skips on a
// developer's machine and fails in CI (internal/testenv); make setup installs it.
package browsertest

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/myelin-net/myelin/internal/testenv"
)

// Browsers are the names chromium goes by on PATH, Debian's first.
var Browsers = []string{"chromium", "chromium-browser", "google-chrome"}

// Start launches a headless chromium for t, with a fresh profile in a temporary
// directory and without the sandbox (the tests run as root, where chromium's sandbox
// refuses to start), and returns a context of its first tab. The browser is killed
// when the test ends.
func Start(t *testing.T) context.Context {
	t.Helper()
	path := ""
	for _, b := range Browsers {
		if p, err := exec.LookPath(b); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testenv.Skipf(t, "needs a headless browser (%s) on PATH: make setup installs Debian's chromium", strings.Join(Browsers, ", "))
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox,
		chromedp.UserDataDir(t.TempDir()),
		chromedp.Flag("disable-dev-shm-usage", true),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelTab := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	t.Cleanup(func() {
		cancelTab()
		cancelAlloc() // waits for the browser process to exit
	})
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	return ctx
}

// Text returns the text content of the first element matching the CSS selector sel.
func Text(ctx context.Context, sel string) (string, error) {
	return chromedp.Run(ctx, chromedp.TextContent(chromedp.CSS(sel)))
}

// Eval evaluates a JavaScript expression in the page.
func Eval[T any](ctx context.Context, expr string) (T, error) {
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		return v, fmt.Errorf("evaluate %s: %w", expr, err)
	}
	return v, nil
}

// Open loads url in the tab.
func Open(ctx context.Context, url string) error {
	if err := chromedp.Do(ctx, chromedp.Navigate(url)); err != nil {
		return fmt.Errorf("open %s: %w", url, err)
	}
	return nil
}

// WaitFor waits until the page has an element matching the CSS selector sel, for at
// most limit (the page is live: elements appear as flows arrive).
func WaitFor(ctx context.Context, sel string, limit time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	if err := chromedp.Do(wctx, chromedp.WaitReady(chromedp.CSS(sel))); err != nil {
		return fmt.Errorf("wait for %s in the page: %w", sel, err)
	}
	return nil
}

// Attr returns the attributes named by attr of every element matching sel, in
// document order ("" where an element lacks it).
func Attr(ctx context.Context, sel, attr string) ([]string, error) {
	expr := fmt.Sprintf(`[...document.querySelectorAll(%q)].map(e => e.getAttribute(%q) || "")`, sel, attr)
	return Eval[[]string](ctx, expr)
}
