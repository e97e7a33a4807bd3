// Package dashboard tests the gateway's dashboard in a real browser: capn's
// services on one embedded nats-server, the gateway in front, and Debian's
// headless Chromium driven by chromedp.
package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// chromium finds the browser; without one the test skips, unless CI=true.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CAPN_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium on PATH (apt-get install -y chromium, or set CAPN_CHROMIUM)"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// capn is a running deployment (tests/internal/harness): the core services
// and the gateway, each as its own daemon.Run on one embedded nats-server.
type capn struct{ *harness.System }

func startCapn(t *testing.T, token string) *capn {
	t.Helper()
	c := &capn{harness.New(t, harness.Options{Token: token})}
	c.StartAll(harness.Core...)
	c.startGateway()
	return c
}

// startGateway runs the gateway (on a free port the first time, the same
// one after) and waits until it answers.
func (c *capn) startGateway() {
	c.T.Helper()
	c.Start(harness.Gateway)
	natstest.WaitFor(c.T, 15*time.Second, "gateway listening", func() bool {
		res, err := http.Get(c.url() + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
}

func (c *capn) stopGateway() { c.Stop(harness.Gateway) }

func (c *capn) url() string { return c.GatewayURL() }

func TestDashboardShowsClusterReady(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	browser := chromium(t)
	token, err := gateway.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	world := startCapn(t, token)
	base := world.url()

	// The static files need no token; the API still does, and a login
	// link needs a code.
	for path, want := range map[string]int{"/": 200, "/ui/app.js": 200, "/v1/clusters": 401, "/login": 401} {
		res, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != want {
			t.Fatalf("GET %s without a token: %d, want %d", path, res.StatusCode, want)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	opts := append(chromedp.DefaultExecAllocatorOptions[:],

		chromedp.ExecPath(browser),
		chromedp.NoSandbox,
		chromedp.DisableGPU,
		chromedp.Flag("headless", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.WindowSize(1400, 1100),
	)
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	// Uncaught exceptions in the page fail the test.
	var mu sync.Mutex
	var pageErrs []string
	if err := chromedp.Listen(bctx, func(ev any) {
		if ex, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			mu.Lock()
			pageErrs = append(pageErrs, exceptionText(ex.ExceptionDetails))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}

	// within runs actions, failing after d (a step that cannot happen
	// fails the test in seconds, not at the test's deadline).
	within := func(d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
		tctx, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		return chromedp.Do(tctx, actions...)
	}
	do := func(actions ...chromedp.Action[chromedp.Void]) error { return within(30*time.Second, actions...) }
	count := func(sel string) int {
		t.Helper()
		n, err := chromedp.Run(bctx, chromedp.Evaluate[int](fmt.Sprintf("document.querySelectorAll(%q).length", sel)))
		if err != nil {
			t.Fatalf("count %s: %v", sel, err)
		}
		return n
	}
	text := func(sel string) string {
		t.Helper()
		// Evaluated, not chromedp.Text: the page re-renders on every watch
		// event, so a node found earlier may be gone.
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).innerText || ''", sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	// shown tells whether the element is laid out (not display:none).
	shown := func(sel string) bool {
		t.Helper()
		b, err := chromedp.Run(bctx, chromedp.Evaluate[bool](fmt.Sprintf("(() => { const e = document.querySelector(%q); return !!e && getComputedStyle(e).display !== 'none'; })()", sel)))
		if err != nil {
			t.Fatalf("is %s shown: %v", sel, err)
		}
		return b
	}

	// Open the page with no token and no session: it says how to log in
	// and shows no empty cluster panels.
	if err := do(
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="token"]`)),
	); err != nil {
		t.Fatalf("open the dashboard: %v", err)
	}
	if got := text(`#conn`); !strings.Contains(got, "capn dashboard") {
		t.Errorf("status without a token %q, want the way to log in", got)
	}
	if shown(`#detail`) {
		t.Error("the cluster panels show before anything is selected (hidden overridden by display:grid)")
	}

	// Log in as capn dashboard does: a one-time link, no token pasted.
	c, err := client.New(base, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	login, err := c.Login(ctx)
	if err != nil {
		t.Fatalf("login code: %v", err)
	}
	if err := do(
		chromedp.Navigate(c.LoginURL(login)),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#who').innerText.includes('by login link')`, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("log in by link: %v (status %q)", err, text(`#conn`))
	}
	if loc, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.pathname + location.search + '|' + String(localStorage.getItem('capn.token'))`)); err != nil || loc != "/|null" {
		t.Errorf("after the login link the page is at %q (want / and no token in localStorage): %v", loc, err)
	}

	manifest, err := os.ReadFile(filepath.Join("..", "..", "examples", "demo-cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := c.Apply(ctx, manifest); err != nil {
		t.Fatalf("apply: %v", err)
	}

	// The fleet row appears and, live from the watch stream, reaches Ready.
	start := time.Now()
	if err := do(
		chromedp.WaitVisible(chromedp.CSS(`#fleet tr[data-cluster="demo"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#fleet tr[data-cluster="demo"][data-phase="Ready"]`)),
	); err != nil {
		t.Fatalf("wait for demo Ready on the page: %v", err)
	}
	t.Logf("page showed demo Ready %s after the apply", time.Since(start).Round(time.Millisecond))

	// Nothing selected: a hint, not empty panels.
	if !shown(`#hint`) || shown(`#detail`) {
		t.Errorf("before a selection: hint shown %v, cluster panels shown %v; want a hint only", shown(`#hint`), shown(`#detail`))
	}
	if h := text(`#hint`); !strings.Contains(h, "Select a cluster") {
		t.Errorf("hint %q", h)
	}

	// Select it by changing the URL of the open page (#cluster=demo): the
	// tree shows the control plane, both pools and all 8 machines Running;
	// the rollout is complete; the timeline has events.
	if err := do(
		chromedp.Evaluate[chromedp.Void](`location.hash = '#cluster=demo'`),
		chromedp.Poll[chromedp.Void](`!!document.querySelector('#tree [data-kind="cluster"][data-phase="Ready"]')`, chromedp.WithPollingTimeout(15*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#tree [data-kind="machine"][data-phase="Running"]').length >= 8`, chromedp.WithPollingTimeout(15*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#events li[data-seq]').length > 0`, chromedp.WithPollingTimeout(15*time.Second)),
	); err != nil {
		t.Fatalf("cluster detail: %v", err)
	}
	if shown(`#hint`) {
		t.Error("the hint still shows with a cluster selected")
	}
	machines := count(`#tree [data-kind="machine"]`)
	running := count(`#tree [data-kind="machine"][data-phase="Running"]`)
	pools := count(`#tree [data-kind="pool"], #tree [data-kind="control-plane"]`)
	if machines != 8 || running != 8 || pools != 3 {
		t.Errorf("tree: %d machines (%d Running), %d pools; want 8, 8, 3", machines, running, pools)
	}
	if n := count(`#events li[data-seq]`); n == 0 || n > 50 {
		t.Errorf("timeline shows %d events, want 1..50", n)
	}
	if cp := text(`#rollout [data-pool="control-plane"]`); !strings.Contains(cp, "3 / 3") {
		t.Errorf("control plane rollout %q, want 3 / 3", cp)
	}
	fleetText := text(`#fleet tr[data-cluster="demo"]`)
	for _, want := range []string{"v1.33.4", "3 / 3", "5 / 5"} {
		if !strings.Contains(fleetText, want) {
			t.Errorf("fleet row %q lacks %q", fleetText, want)
		}
	}
	if strings.Contains(fleetText, "→") {
		t.Errorf("fleet row %q shows an upgrade that is not under way", fleetText)
	}

	// Each healthy machine shows one "healthy" chip and no condition list;
	// a click on the chip shows the conditions.
	if n, conds := count(`#tree [data-kind="machine"] [data-health="healthy"]`), count(`#tree [data-kind="machine"] .cond`); n != 8 || conds != 0 {
		t.Errorf("%d healthy chips and %d conditions shown among 8 healthy machines; want 8 and 0 (machine: %q)", n, conds, text(`#tree [data-kind="machine"]`))
	}
	if err := do(
		chromedp.Click(chromedp.CSS(`#tree [data-kind="machine"] [data-health="healthy"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#tree [data-kind="machine"] .cond.true').length > 0`, chromedp.WithPollingTimeout(5*time.Second)),
	); err != nil {
		t.Errorf("expand a healthy machine's conditions: %v", err)
	}
	if n := count(`#tree [data-kind="machine"] .cond.false, #tree [data-kind="machine"] .cond.unknown`); n != 0 {
		t.Errorf("%d bad conditions among healthy machines", n)
	}

	// A change shows up live: scale md-1 from 2 to 3.
	if _, err := c.Scale(ctx, "demo", "md-1", 3); err != nil {
		t.Fatalf("scale: %v", err)
	}
	if err := do(
		chromedp.Poll[chromedp.Void](`(document.querySelector('#fleet tr[data-cluster="demo"]') || {}).innerText.includes('6 / 6')`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#tree [data-kind="machine"][data-phase="Running"]').length === 9`, chromedp.WithPollingTimeout(20*time.Second)),
	); err != nil {
		t.Fatalf("scale md-1 to 3 on the page: %v (fleet row %q, rollout %q)", err, text(`#fleet tr[data-cluster="demo"]`), text(`#rollout [data-pool="md-1"]`))
	}
	if r := text(`#rollout [data-pool="md-1"]`); !strings.Contains(r, "3 / 3") {
		t.Errorf("md-1 rollout %q after the scale, want 3 / 3", r)
	}

	// Pasting a token still works; the page keeps it in localStorage (the
	// login link's session lives in the gateway's memory, which the
	// restart below ends).
	if err := do(
		chromedp.SendKeys(chromedp.CSS(`#token`), token),
		chromedp.Click(chromedp.CSS(`#token-save`)),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#who').innerText.includes('by token')`, chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("paste the token: %v (status %q, who %q)", err, text(`#conn`), text(`#who`))
	}

	// The gateway restarts: the page shows it reconnecting, then resumes
	// (the new gateway cannot resume the old ids, so it RESETs) and keeps
	// following changes: scale md-1 back to 2.
	world.stopGateway()
	if err := do(chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="reconnecting"]`))); err != nil {
		t.Fatalf("page did not notice the gateway stop: %v", err)
	}
	world.startGateway()
	if err := do(chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`))); err != nil {
		t.Fatalf("page did not reconnect: %v", err)
	}
	if _, err := c.Scale(ctx, "demo", "md-1", 2); err != nil {
		t.Fatalf("scale: %v", err)
	}
	if err := do(
		chromedp.Poll[chromedp.Void](`(document.querySelector('#fleet tr[data-cluster="demo"]') || {}).innerText.includes('5 / 5')`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Poll[chromedp.Void](`document.querySelectorAll('#tree [data-kind="machine"]').length === 8`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.WaitVisible(chromedp.CSS(`#fleet tr[data-cluster="demo"][data-phase="Ready"]`)),
	); err != nil {
		t.Fatalf("scale md-1 to 2 after the reconnect: %v (fleet row %q)", err, text(`#fleet tr[data-cluster="demo"]`))
	}

	// An upgrade held by a pause shows current → target in the fleet and
	// the tree; after resume it completes and the arrow goes.
	if _, err := c.Pause(ctx, "demo"); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if _, err := c.Upgrade(ctx, "demo", "v1.34.2"); err != nil {
		t.Fatalf("upgrade: %v", err)
	}
	if err := do(
		chromedp.Poll[chromedp.Void](`(document.querySelector('#fleet tr[data-cluster="demo"]') || {}).innerText.includes('v1.33.4 → v1.34.2')`, chromedp.WithPollingTimeout(20*time.Second)),
		chromedp.Poll[chromedp.Void](`!!document.querySelector('#tree [data-kind="control-plane"] [data-upgrade="v1.33.4→v1.34.2"]')`, chromedp.WithPollingTimeout(20*time.Second)),
	); err != nil {
		t.Fatalf("version during the upgrade: %v (fleet row %q)", err, text(`#fleet tr[data-cluster="demo"]`))
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	dir := os.Getenv("CAPN_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "dashboard.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if _, err := c.Resume(ctx, "demo"); err != nil {
		t.Fatalf("resume: %v", err)
	}
	start = time.Now()
	if err := within(90*time.Second,
		chromedp.Poll[chromedp.Void](`(() => { const r = document.querySelector('#fleet tr[data-cluster="demo"][data-phase="Ready"]'); return !!r && r.innerText.includes('v1.34.2') && !r.innerText.includes('→'); })()`, chromedp.WithPollingTimeout(90*time.Second)),
	); err != nil {
		t.Fatalf("the upgrade did not complete on the page: %v (fleet row %q)", err, text(`#fleet tr[data-cluster="demo"]`))
	}
	t.Logf("page showed the upgrade done %s after the resume", time.Since(start).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	if len(pageErrs) > 0 {
		t.Errorf("uncaught exceptions in the page: %s", strings.Join(pageErrs, "; "))
	}
}

// exceptionText describes an uncaught exception of the page.
func exceptionText(d *cdpruntime.ExceptionDetails) string {
	if d == nil {
		return "exception"
	}
	s := d.Text
	if d.Exception != nil && d.Exception.Description != "" {
		s += " " + d.Exception.Description
	}
	return s
}
