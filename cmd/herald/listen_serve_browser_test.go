package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/herald-mq/herald/internal/testenv"
	"github.com/herald-mq/herald/multicast"
)

// TestListenServe_Browser: the dashboard page served by herald listen --serve, in headless
// Chromium (Debian's chromium package): it shows the values of the channel's messages, the live
// topics, and a row per gap. With HERALD_TEST_ARTIFACTS set, a screenshot is saved there.
func TestListenServe_Browser(t *testing.T) {
	path := ""
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			path = p
			break
		}
	}
	if path == "" {
		testenv.Missing(t, testenv.InteropEnv, "needs Chromium to run a real browser: apt-get install chromium")
		return
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.Headless,
		chromedp.NoSandbox, chromedp.DisableGPU, chromedp.UserDataDir(t.TempDir()))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelC := chromedp.NewContext(actx, chromedp.WithErrorf(t.Logf))
	defer func() { cancelC(); cancelA() }()
	h := startTestServe(t, 1<<20)
	if err := chromedp.Do(ctx); err != nil { // starts the browser
		t.Fatalf("start %s: %v", path, err)
	}
	if err := chromedp.Do(ctx, chromedp.Navigate("http://"+h.Addr().String()+"/?topic=px.>")); err != nil {
		t.Fatal(err)
	}
	until := func(what, expr string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
			if err != nil {
				t.Fatalf("evaluate %s: %v", expr, err)
			}
			if ok {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the page did not show %s", what)
			}
		}
	}
	until("its event stream open", `document.body.dataset.state === "live"`)
	const sess = 0x65670000aaaabbbb
	h.publish(multicast.Message{Topic: "px.eu", Stream: 1, StreamSeq: 1, Body: []byte("1.0841"), Session: sess})
	h.publish(multicast.Gap{Topic: "px.eu", Stream: 1, From: 2, To: 4, Reason: multicast.ReasonGone, Session: sess})
	h.publish(multicast.Message{Topic: "px.eu", Stream: 1, StreamSeq: 5, Body: []byte("1.0842"), Session: sess})
	until("the latest value", `(document.querySelector('.card[data-series="px.eu"] .value') || {}).textContent === "1.0842"`)
	until("the gap", `!!document.querySelector('#gaps tr.gap[data-gap="px.eu 2-4"]') && document.body.dataset.gaps === "1"`)
	until("the live topic", `!!document.querySelector('tr[data-topic="px.eu"]')`)
	if dir := os.Getenv("HERALD_TEST_ARTIFACTS"); dir != "" {
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "listen-serve.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
