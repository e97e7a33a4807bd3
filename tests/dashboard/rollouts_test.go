package dashboard

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cdpruntime "github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/capn-dev/capn/events"
	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/client"
	capnv1 "github.com/capn-dev/capn/schemas/capn/v1alpha1"
	"github.com/capn-dev/capn/services/fleet-manager/wave"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// fakeClock is the fleet-manager's clock: a wave soaks until the test
// moves it, so the page is read while the canary wave soaks.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// The class of tests/fleet: one sim control-plane machine, and a health
// policy that judges KernelDeadlock at once.
const rolloutClass = `apiVersion: capn.dev/v1alpha1
kind: ClusterClass
metadata: {name: standard}
spec:
  template:
    kubernetesVersion: v1.34.2
    controlPlane: {provider: sim, replicas: 1}
    health:
      unhealthyConditions:
      - {type: KernelDeadlock, status: "True", timeout: 0s}
  variables:
  - {name: size, type: string, default: small, enum: [small, large], paths: [/controlPlane/template/parameters/size]}
`

// TestDashboardShowsRolloutWaves: six clusters of one class, a class
// revision rolled out in waves 2, 50%, the rest on sim with every service
// running. The page lists the rollout (change, phase, current wave,
// clusters done of total); selected, it shows its three waves with their
// sizes, states and clusters per state while the canary wave soaks. A
// fault in a canary halts the rollout: the page shows Halted and the halt
// reason, the API's, in the list and the rollout's panel. A rollout whose
// variable value is markup shows it as text.
func TestDashboardShowsRolloutWaves(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	browser := chromium(t)
	token, err := gateway.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	world := &capn{harness.New(t, harness.Options{Token: token, Now: clk.Now, FleetTick: 50 * time.Millisecond})}
	world.StartAll(harness.All...)
	world.startGateway()
	base := world.url()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cl, err := client.New(base, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}

	if _, _, err := cl.ApplyClass(ctx, []byte(rolloutClass)); err != nil {
		t.Fatal(err)
	}
	names := make([]string, 6)
	for i := range names {
		names[i] = fmt.Sprintf("r%d", i)
		m := fmt.Sprintf("apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: %s, labels: {fleet: web}}\nspec:\n  topology: {class: standard}\n", names[i])
		if _, _, err := cl.Apply(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	natstest.WaitFor(t, 60*time.Second, "every cluster Ready", func() bool {
		for _, n := range names {
			if !world.IsReady(n) {
				return false
			}
		}
		return true
	})
	v2 := strings.Replace(rolloutClass, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.34.3", 1)
	if c, _, err := cl.ApplyClass(ctx, []byte(v2)); err != nil || c.GetStatus().GetRevision() != 2 {
		t.Fatalf("class revision 2: %v %v", c.GetStatus(), err)
	}
	if _, err := cl.CreateRollout(ctx, []byte(`apiVersion: capn.dev/v1alpha1
kind: Rollout
metadata: {name: to-r2}
spec:
  clusterSelector: {matchLabels: {fleet: web}}
  change: {class: standard}
  waves: ["2", "50%", "100%"]
  soak: 10m
  readyTimeout: 30m
`)); err != nil {
		t.Fatalf("rollout: %v", err)
	}
	created := time.Now()
	// A rollout of no cluster whose variable value is markup: the page
	// must show it as text.
	const markup = `<img id=injected src=x>`
	if _, err := cl.CreateRollout(ctx, []byte(`{"apiVersion":"capn.dev/v1alpha1","kind":"Rollout","metadata":{"name":"probe"},
"spec":{"clusterSelector":{"matchLabels":{"fleet":"none"}},"change":{"variables":{"size":"`+markup+`"}}}}`)); err != nil {
		t.Fatalf("probe rollout: %v", err)
	}

	bctx, pageErrs := openBrowser(t, ctx, browser)
	do := func(d time.Duration, actions ...chromedp.Action[chromedp.Void]) error {
		tctx, cancel := context.WithTimeout(bctx, d)
		defer cancel()
		return chromedp.Do(tctx, actions...)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {}).innerText || ''", sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return s
	}
	attr := func(sel, name string) string {
		t.Helper()
		s, err := chromedp.Run(bctx, chromedp.Evaluate[string](fmt.Sprintf("(document.querySelector(%q) || {getAttribute: () => ''}).getAttribute(%q) || ''", sel, name)))
		if err != nil {
			t.Fatalf("attribute %s of %s: %v", name, sel, err)
		}
		return s
	}

	// Log in with the token (kept in localStorage, as a pasted one is).
	if err := do(30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf("localStorage.setItem('capn.token', %q)", token)),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#fleet tr[data-cluster="r5"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#rollouts tr[data-rollout="to-r2"]`)),
	); err != nil {
		t.Fatalf("load the page: %v (status %q, rollouts %q)", err, text(`#conn`), text(`#rollouts`))
	}
	// A click lands where the button was a moment before: the live tables
	// above it can still move it (a row that arrives or grows), and then
	// the click misses, as a person's would. Click again, as they would.
	for try := 0; try < 3; try++ {
		if err = do(10*time.Second,
			chromedp.Click(chromedp.CSS(`#rollouts tr[data-rollout="to-r2"] button`)),
			chromedp.WaitVisible(chromedp.CSS(`#rollout-detail`)),
		); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("open the rollout: %v (status %q, rollouts %q)", err, text(`#conn`), text(`#rollouts`))
	}
	if h := attr(`#rollouts tr[data-rollout="to-r2"]`, "aria-selected"); h != "true" {
		t.Errorf("the selected rollout's row has aria-selected %q", h)
	}
	if loc, err := chromedp.Run(bctx, chromedp.Evaluate[string](`location.hash`)); err != nil || loc != "#rollout=to-r2" {
		t.Errorf("hash %q after selecting the rollout, want #rollout=to-r2 (%v)", loc, err)
	}

	// The canaries r0 and r1 move and soak (the fake clock stands still):
	// wave 1 Soaking with 2 Ready, waves 2 and 3 Pending with 1 and 3.
	if err := do(60*time.Second,
		chromedp.Poll[chromedp.Void](`!!document.querySelector('#waves tr[data-wave="0"][data-state="Soaking"] [data-ready="2"]')`, chromedp.WithPollingTimeout(60*time.Second)),
	); err != nil {
		t.Fatalf("canary wave soaking on the page: %v (waves %q)", err, text(`#waves`))
	}
	t.Logf("page showed the canary wave soaking %s after the rollout was created", time.Since(created).Round(time.Millisecond))
	waves := []struct{ size, state, pending string }{{"2", wave.WaveSoaking, "0"}, {"1", wave.WavePending, "1"}, {"3", wave.WavePending, "3"}}
	for i, w := range waves {
		row := fmt.Sprintf(`#waves tr[data-wave="%d"]`, i)
		if got := attr(row, "data-state"); got != w.state {
			t.Errorf("wave %d state %q, want %q", i+1, got, w.state)
		}
		if got := attr(row+" [data-size]", "data-size"); got != w.size {
			t.Errorf("wave %d size %q, want %s", i+1, got, w.size)
		}
		if got := attr(row+" [data-pending]", "data-pending"); got != w.pending {
			t.Errorf("wave %d pending %q, want %s", i+1, got, w.pending)
		}
	}
	if n, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.querySelectorAll('#waves tbody tr').length`)); err != nil || n != 3 {
		t.Errorf("%d wave rows, want 3 (%v)", n, err)
	}
	if s := text(`#waves tr[data-wave="0"]`); !strings.Contains(s, "canary") || !strings.Contains(s, "Ready 2") {
		t.Errorf("canary wave row %q", s)
	}
	if got := attr(`#waves tr[data-wave="0"] time`, "datetime"); got == "" {
		t.Error("the canary wave shows no start time")
	}
	row := text(`#rollouts tr[data-rollout="to-r2"]`)
	for _, want := range []string{"class standard revision 2", "Progressing", "1 / 3", "0 / 6"} {
		if !strings.Contains(row, want) {
			t.Errorf("rollout row %q lacks %q", row, want)
		}
	}
	if !strings.Contains(text(`#rollouts-h`), "Rollouts") || text(`#rollouts-state`) != "" {
		t.Errorf("rollouts heading %q: a read failed", text(`#rollouts-h`))
	}

	// Markup in a rollout's change is text, not elements.
	probe := text(`#rollouts tr[data-rollout="probe"]`)
	injected, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`!!document.getElementById('injected')`))
	if err != nil || injected || !strings.Contains(probe, markup) {
		t.Errorf("probe row %q (injected element present: %v, %v), want the markup as text", probe, injected, err)
	}

	// The fault: r1's machine reports KernelDeadlock and keeps it.
	ms, err := cl.Machines(ctx, "r1", client.ListOptions{})
	if err != nil || len(ms) == 0 {
		t.Fatalf("r1 machines: %v %v", ms, err)
	}
	pub := events.NewPublisher(world.JS, "test")
	for _, m := range ms {
		if m.GetMetadata().GetDeletionTimestamp() != nil {
			continue
		}
		now := time.Now()
		nc := &capnv1.NodeConditions{Cluster: "r1", Machine: m.GetMetadata().GetName(), Source: "test", Time: timestamppb.New(now),
			Conditions: []*capnv1.NodeCondition{{Type: "KernelDeadlock", Status: "True", Reason: "DockerHung", Message: "test fault",
				LastTransitionTime: timestamppb.New(now), LastHeartbeatTime: timestamppb.New(now)}}}
		id := fmt.Sprintf("test.conditions.r1.%s.%d", m.GetMetadata().GetName(), now.UnixNano())
		if _, err := pub.Publish(ctx, events.HealthSubject("r1", m.GetMetadata().GetName(), "conditions"), events.TypeNodeConditions, id, nc); err != nil {
			t.Fatal(err)
		}
	}
	start := time.Now()
	if err := do(60*time.Second,
		chromedp.WaitVisible(chromedp.CSS(`#rollouts tr[data-rollout="to-r2"][data-phase="Halted"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#rollout-halt`)),
	); err != nil {
		t.Fatalf("halt on the page: %v (rollout %q)", err, text(`#rollouts tr[data-rollout="to-r2"]`))
	}
	t.Logf("page showed the halt %s after the fault", time.Since(start).Round(time.Millisecond))
	ro, err := cl.Rollout(ctx, "to-r2")
	if err != nil || ro.GetStatus().GetPhase() != wave.PhaseHalted || ro.GetStatus().GetHaltReason() == "" {
		t.Fatalf("the API's rollout: %v %v", ro.GetStatus(), err)
	}
	reason := ro.GetStatus().GetHaltReason()
	if got := text(`#rollout-halt`); !strings.Contains(got, reason) || !strings.Contains(got, "r1") {
		t.Errorf("halt panel %q, want the reason %q", got, reason)
	}
	if got := text(`#rollouts tr[data-rollout="to-r2"]`); !strings.Contains(got, reason) {
		t.Errorf("rollout row %q lacks the halt reason %q", got, reason)
	}
	// Nothing moved past the canaries.
	if got := attr(`#waves tr[data-wave="1"]`, "data-state"); got != wave.WavePending {
		t.Errorf("wave 2 %q after the halt, want Pending", got)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveScreenshot(t, "dashboard-rollouts.png", shot)

	// Deselected by the URL, the panel goes.
	if err := do(10*time.Second,
		chromedp.Evaluate[chromedp.Void](`location.hash = ''`),
		chromedp.Poll[chromedp.Void](`document.querySelector('#rollout-detail').hidden`, chromedp.WithPollingTimeout(5*time.Second)),
	); err != nil {
		t.Errorf("deselect the rollout: %v", err)
	}
	if errs := pageErrs(); len(errs) > 0 {
		t.Errorf("uncaught exceptions in the page: %s", strings.Join(errs, "; "))
	}
}

// openBrowser starts headless Chromium for the test; pageErrs returns the
// page's uncaught exceptions so far.
func openBrowser(t *testing.T, ctx context.Context, browser string) (context.Context, func() []string) {
	t.Helper()
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
	t.Cleanup(acancel)
	bctx, bcancel := chromedp.NewContext(actx)
	t.Cleanup(bcancel)
	var mu sync.Mutex
	var errs []string
	if err := chromedp.Listen(bctx, func(ev any) {
		if ex, ok := ev.(*cdpruntime.EventExceptionThrown); ok {
			mu.Lock()
			errs = append(errs, exceptionText(ex.ExceptionDetails))
			mu.Unlock()
		}
	}); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return bctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), errs...)
	}
}

// saveScreenshot writes a screenshot to $CAPN_SCREENSHOT_DIR (else the
// test's temporary directory) and logs where.
func saveScreenshot(t *testing.T, name string, png []byte) {
	t.Helper()
	dir := os.Getenv("CAPN_SCREENSHOT_DIR")
	if dir == "" {
		dir = t.TempDir()
	} else if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
}
