#!/usr/bin/env python3
"""The viewer at scale: `fragscope view` of a generated log of N events (default 10^8), then the
page in Chromium (playwright): time to first paint, zoom latency, the page's JS heap, and the bytes
the page loaded and the bytes written; beside it, PyTorch's memory_viz on the same log exported as
a snapshot pickle (`fragscope convert`), at the sizes it can load at all.

  python3 bench/view_benchmark.py [--events N] [--build build] [--memory-viz-events N ...]

Prints a markdown block for bench/RESULTS.md. Needs the build's `fragscope` and
`bench/analysis_benchmark` (the synthetic log writer), chromium and playwright.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def timed(cmd, **kw):
    start = time.monotonic()
    subprocess.run(cmd, check=True, **kw)
    return time.monotonic() - start


def directory_bytes(path):
    total = 0
    for base, _, files in os.walk(path):
        total += sum(os.path.getsize(os.path.join(base, f)) for f in files)
    return total


def measure_page(url, zooms):
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                    args=["--no-sandbox", "--disable-dev-shm-usage",
                                          "--enable-precise-memory-info"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        loaded = []
        page.on("response", lambda r: loaded.append(r.url))
        start = time.monotonic()
        page.goto(url)
        page.wait_for_function("() => window.fragscopeViewState && "
                               "window.fragscopeViewState.tilesCached > 0 && "
                               "window.fragscopeViewState.pendingTiles === 0", timeout=120000)
        first_paint = time.monotonic() - start
        latencies = []
        box = page.locator("#timeline").bounding_box()
        for i in range(zooms):
            before = page.evaluate("() => window.fragscopeViewState.drawCount")
            t0 = time.monotonic()
            page.mouse.move(box["x"] + box["width"] * (0.3 + 0.4 * (i % 2)), box["y"] + 50)
            page.mouse.wheel(0, -400)
            page.wait_for_function(
                f"() => window.fragscopeViewState.drawCount > {before} && "
                "window.fragscopeViewState.pendingTiles === 0", timeout=30000)
            latencies.append(time.monotonic() - t0)
        state = page.evaluate("() => window.fragscopeViewState")
        client = page.context.new_cdp_session(page)
        client.send("Performance.enable")
        metrics = {m["name"]: m["value"] for m in client.send("Performance.getMetrics")["metrics"]}
        browser.close()
    return {"first_paint_s": first_paint, "zoom_s": latencies, "state": state,
            "js_heap_bytes": metrics.get("JSHeapUsedSize", 0), "requests": len(loaded)}


def memory_viz(fragscope, log, events, tmp):
    """How far PyTorch's memory_viz gets on the same trace: the snapshot pickle, its HTML
    (torch.cuda._memory_viz trace_plot embeds the snapshot), and whether Chromium renders it."""
    pickle_path = os.path.join(tmp, f"mv-{events}.pickle")
    html = os.path.join(tmp, f"mv-{events}.html")
    result = {"events": events}
    try:
        subprocess.run([fragscope, "convert", log, pickle_path], check=True,
                       capture_output=True, timeout=1800)
        result["pickle_bytes"] = os.path.getsize(pickle_path)
        t = time.monotonic()
        subprocess.run([sys.executable, "-m", "torch.cuda._memory_viz", "trace_plot", pickle_path,
                        "-o", html], check=True, capture_output=True, timeout=1800)
        result["html_s"] = time.monotonic() - t
        result["html_bytes"] = os.path.getsize(html)
    except (subprocess.CalledProcessError, subprocess.TimeoutExpired) as e:
        result["failed"] = f"{type(e).__name__} at {'html' if 'pickle_bytes' in result else 'pickle'}"
        return result
    # memory_viz's page imports its code (MemoryViz.js) from a CDN; torch's wheel does not ship
    # it. Without the network it cannot render at all: say so rather than wait.
    with open(html, errors="replace") as f:
        page_text = f.read()
    remote = [line.strip() for line in page_text.splitlines() if "import" in line and "https://" in line]
    if remote:
        result["render"] = "not offline: " + remote[0][:100]
        return result
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"),
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page()
        t = time.monotonic()
        try:
            page.goto("file://" + html, timeout=600000)
            page.wait_for_selector("svg", timeout=600000)
            result["render_s"] = time.monotonic() - t
        except Exception as e:  # playwright's timeout or a crashed tab
            result["failed"] = f"render: {str(e).splitlines()[0][:80]}"
        browser.close()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=100_000_000)
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--zooms", type=int, default=8)
    parser.add_argument("--memory-viz-events", type=int, nargs="*", default=[100_000, 1_000_000])
    args = parser.parse_args()
    fragscope = os.path.join(args.build, "fragscope")
    generator = os.path.join(args.build, "bench", "analysis_benchmark")
    with tempfile.TemporaryDirectory(prefix="fragscope-view-bench-") as tmp:
        log = os.path.join(tmp, "big.fslog")
        gen_s = timed([generator, f"--write_synthetic_log={log}", f"--events={args.events}"],
                      stdout=subprocess.DEVNULL)
        view = os.path.join(tmp, "view")
        view_s = timed([fragscope, "view", log, "--out", view], stdout=subprocess.DEVNULL)
        page = measure_page("file://" + os.path.join(view, "index.html"), args.zooms)
        written = directory_bytes(view)
        mv = []
        for n in args.memory_viz_events:
            small = os.path.join(tmp, f"small-{n}.fslog")
            subprocess.run([generator, f"--write_synthetic_log={small}", f"--events={n}"],
                           check=True, stdout=subprocess.DEVNULL)
            mv.append(memory_viz(fragscope, small, n, tmp))
    zoom = sorted(page["zoom_s"])
    print(f"events {args.events:,}: log written in {gen_s:.1f} s")
    print(f"| figure | value |\n|---|---|")
    print(f"| `fragscope view --out` (analysis, sweep, levels, layouts) | {view_s:.1f} s |")
    print(f"| files written | {written / 2**20:.1f} MiB |")
    print(f"| time to first paint (navigation to the timeline drawn) | {page['first_paint_s']:.2f} s |")
    print(f"| zoom latency, median / max of {len(zoom)} wheel steps | "
          f"{1000 * zoom[len(zoom) // 2]:.0f} / {1000 * zoom[-1]:.0f} ms |")
    print(f"| page JS heap after the zooms | {page['js_heap_bytes'] / 2**20:.1f} MiB |")
    print(f"| files the page loaded (first paint and the zooms) | {page['requests']} |")
    print(f"| tiles cached at the end | {page['state'].get('tilesCached')} |")
    for r in mv:
        print(f"| memory_viz, {r['events']:,} events | " + json.dumps(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
