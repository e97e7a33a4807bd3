package dashboard

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/capn-dev/capn/events/natstest"
	"github.com/capn-dev/capn/gateway"
	"github.com/capn-dev/capn/gateway/client"
	"github.com/capn-dev/capn/services/daemon"
	"github.com/capn-dev/capn/services/maintenance"
	"github.com/capn-dev/capn/tests/internal/harness"
)

// office has a Sunday window in Berlin, auto-patch and a nightly
// hibernation schedule (the cluster of tests/e2e's maintenance test).
const office = `apiVersion: capn.dev/v1alpha1
kind: Cluster
metadata: {name: office}
spec:
  kubernetesVersion: v1.33.4
  controlPlane: {provider: sim, replicas: 1}
  maintenance:
    autoPatch: true
    windows:
    - {days: [Sun], start: "02:30", end: "04:00", timeZone: Europe/Berlin}
  hibernation:
    schedules:
    - {start: "0 19 * * *", end: "0 7 * * *", location: Europe/Berlin}
`

const versionCatalogue = `apiVersion: capn.dev/v1alpha1
kind: KubernetesVersions
metadata: {name: default}
spec:
  versions:
  - {version: v1.33.4, classification: deprecated}
  - {version: v1.33.6, classification: supported}
  - {version: v1.34.2}
`

// TestDashboardShowsClassAndMaintenance: the maintenance service runs on
// a fake clock (Saturday 24 October 2026, 10:00Z). The selected cluster
// office shows its closed window and when the next opens (Sunday 00:30Z,
// 02:30 CEST), auto-patch on, the auto-patch to v1.33.6 waiting for it,
// and the next scheduled transition (hibernate at 17:00Z, 19:00 CEST). A
// class cluster shows its class, its pinned revision 1 and that it is not
// up to date once the class has revision 2. A cluster with none of it
// shows no block.
func TestDashboardShowsClassAndMaintenance(t *testing.T) {
	if testing.Short() {
		t.Skip("browser test: skipped with -short")
	}
	browser := chromium(t)
	token, err := gateway.GenerateToken()
	if err != nil {
		t.Fatal(err)
	}
	clk := &fakeClock{now: time.Date(2026, 10, 24, 10, 0, 0, 0, time.UTC)}
	world := &capn{harness.New(t, harness.Options{Token: token, Services: map[string]func(*harness.Factory) daemon.Service{
		maintenance.Name: func(*harness.Factory) daemon.Service {
			return maintenance.New(maintenance.Config{Now: clk.Now, Resync: 100 * time.Millisecond})
		},
	}})}
	world.StartAll(harness.Core...)
	world.Start(maintenance.Name)
	world.startGateway()
	base := world.url()
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cl, err := client.New(base, client.WithToken(token))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := cl.PutKubernetesVersions(ctx, "default", []byte(versionCatalogue)); err != nil {
		t.Fatalf("catalogue: %v", err)
	}
	if _, _, err := cl.ApplyClass(ctx, []byte(rolloutClass)); err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{office,
		"apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: shop}\nspec:\n  topology: {class: standard}\n",
		"apiVersion: capn.dev/v1alpha1\nkind: Cluster\nmetadata: {name: plain}\nspec:\n  kubernetesVersion: v1.34.2\n  controlPlane: {provider: sim, replicas: 1}\n",
	} {
		if _, _, err := cl.Apply(ctx, []byte(m)); err != nil {
			t.Fatal(err)
		}
	}
	v2 := strings.Replace(rolloutClass, "kubernetesVersion: v1.34.2", "kubernetesVersion: v1.34.3", 1)
	if c, _, err := cl.ApplyClass(ctx, []byte(v2)); err != nil || c.GetStatus().GetRevision() != 2 {
		t.Fatalf("class revision 2: %v %v", c.GetStatus(), err)
	}
	opens := time.Date(2026, 10, 25, 0, 30, 0, 0, time.UTC)
	hibernates := time.Date(2026, 10, 24, 17, 0, 0, 0, time.UTC)
	natstest.WaitFor(t, 60*time.Second, "office's status: the auto-patch waits for Sunday 00:30Z", func() bool {
		c, err := cl.Get(ctx, "office")
		if err != nil {
			return false
		}
		m, h := c.GetStatus().GetMaintenance(), c.GetStatus().GetHibernation()
		return len(m.GetWaiting()) == 1 && m.GetWaiting()[0].GetTo() == "v1.33.6" && m.GetNextWindowOpen().AsTime().Equal(opens) &&
			h.GetNextTransition().AsTime().Equal(hibernates) && h.GetNextHibernates()
	})

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

	if err := do(30*time.Second,
		chromedp.Navigate(base+"/"),
		chromedp.Evaluate[chromedp.Void](fmt.Sprintf("localStorage.setItem('capn.token', %q)", token)),
		chromedp.Navigate(base+"/"),
		chromedp.WaitVisible(chromedp.CSS(`#conn[data-state="live"]`)),
		chromedp.Evaluate[chromedp.Void](`location.hash = '#cluster=office'`),
		chromedp.WaitVisible(chromedp.CSS(`#maint [data-maint="waiting"] li[data-change="AutoPatch"]`)),
	); err != nil {
		dbg, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`JSON.stringify(state.clusters.get('office'))`))
		t.Fatalf("office's maintenance on the page: %v (block %q, errors %q, office %s)", err, text(`#maint`), pageErrs(), dbg)
	}
	if got := attr(`#maint [data-window="closed"]`, "data-window"); got != "closed" {
		t.Errorf("window state %q, want closed (block %q)", got, text(`#maint`))
	}
	if got := attr(`#maint [data-maint="window"] time`, "datetime"); got != opens.Format(time.RFC3339) {
		t.Errorf("next window opens %q, want %s", got, opens.Format(time.RFC3339))
	}
	if got := attr(`#maint [data-maint="auto-patch"] [data-on]`, "data-on"); got != "true" {
		t.Errorf("auto-patch %q, want on", got)
	}
	if got := attr(`#maint [data-maint="confine"] [data-on]`, "data-on"); got != "false" {
		t.Errorf("confine spec rollouts %q, want off", got)
	}
	if got := text(`#maint [data-maint="waiting"] li[data-change="AutoPatch"]`); !strings.Contains(got, "v1.33.4 → v1.33.6") || !strings.Contains(got, "waits for the maintenance window") {
		t.Errorf("waiting entry %q, want the patch v1.33.4 → v1.33.6 and why", got)
	}
	if got := attr(`#maint [data-maint="next-transition"] [data-transition]`, "data-transition"); got != "hibernate" {
		t.Errorf("next transition %q, want hibernate", got)
	}
	if got := attr(`#maint [data-maint="next-transition"] time`, "datetime"); got != hibernates.Format(time.RFC3339) {
		t.Errorf("next transition at %q, want %s", got, hibernates.Format(time.RFC3339))
	}
	if got := attr(`#maint [data-hibernated]`, "data-hibernated"); got != "false" {
		t.Errorf("hibernated %q, want false", got)
	}
	if got := text(`#maint`); strings.Contains(got, "class") && strings.Contains(got, "standard") {
		t.Errorf("office has no class, block %q", got)
	}
	shot, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	saveScreenshot(t, "dashboard-maintenance.png", shot)

	// The class cluster: class standard, pinned revision 1 of 2.
	if err := do(30*time.Second,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#cluster=shop'`),
		chromedp.WaitVisible(chromedp.CSS(`#maint [data-up-to-date="false"]`)),
	); err != nil {
		t.Fatalf("shop's class on the page: %v (block %q)", err, text(`#maint`))
	}
	if got := attr(`#maint [data-revision]`, "data-revision"); got != "1" {
		t.Errorf("pinned revision %q, want 1 (block %q)", got, text(`#maint`))
	}
	if got := text(`#maint`); !strings.Contains(got, "standard") || !strings.Contains(got, "of 2") {
		t.Errorf("shop's block %q, want class standard, revision 1 of 2", got)
	}
	if got := text(`#maint`); strings.Contains(got, "auto-patch") || strings.Contains(got, "window") {
		t.Errorf("shop has no maintenance, block %q", got)
	}

	// A cluster with neither shows no block.
	if err := do(30*time.Second,
		chromedp.Evaluate[chromedp.Void](`location.hash = '#cluster=plain'`),
		chromedp.WaitVisible(chromedp.CSS(`#tree [data-kind="cluster"][data-name="plain"]`)),
		chromedp.Poll[chromedp.Void](`document.querySelector('#maint').hidden`, chromedp.WithPollingTimeout(5*time.Second)),
	); err != nil {
		t.Errorf("plain's block: %v (block %q)", err, text(`#maint`))
	}
	if errs := pageErrs(); len(errs) > 0 {
		t.Errorf("uncaught exceptions in the page: %s", strings.Join(errs, "; "))
	}
}
