#!/usr/bin/env python3
"""The viewer's page in Chromium (playwright, the system browser): it loads, draws the timeline,
zooms (buttons and wheel) and pans within bounded tiles, shows the allocator's segments at the
first OOM with its pinning blocks marked, a block's details, and a moment clicked on the timeline;
no console or page errors. --mode ranks: the rank selector and the cross-rank table switch the
rank shown; --mode diff: two timelines that zoom together aligned by phase, both layouts at a
click; --mode hostile: strings from the data shown as text. Screenshots go to --artifacts.

  viewer_browser_test.py (--dir VIEW_DIR | --url URL) [--mode MODE] [--artifacts DIR]

Exit 0 on success, 1 with the failed check, 77 (skipped) without chromium or playwright.
"""
import argparse
import os
import shutil
import sys
import tempfile

STATE = "window.fragscopeViewState"
SETTLED = f"() => {STATE} && {STATE}.tilesCached > 0 && {STATE}.pendingTiles === 0"


class Failure(Exception):
    pass


def check(condition, what):
    if not condition:
        raise Failure(what)


def settle(page, action):
    """Runs `action` and waits for the redraw it causes, with every tile it needs loaded."""
    before = page.evaluate(f"() => {STATE}.drawCount")
    action()
    page.wait_for_function(f"() => {STATE}.drawCount > {before} && {STATE}.pendingTiles === 0",
                           timeout=30000)
    return page.evaluate(f"() => {STATE}")


def run(page, url, shots):
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(SETTLED, timeout=30000)
    state = page.evaluate(f"() => {STATE}")
    check(state["drawCount"] >= 1, "the timeline was never drawn")
    check(page.inner_text("#verdict").strip() != "", "the verdict is empty")
    check("by module: " in page.inner_text("#verdict"), "who holds the peak by module is missing")
    check(page.locator("#oom-list li").count() >= 1, "no OOM is listed")
    page.screenshot(path=os.path.join(shots, "overview.png"))
    whole = state["range"]

    # Zoom with the buttons, then the wheel around the pointer: the range narrows, the level gets
    # finer (or is the finest), and the page keeps at most 64 tiles.
    for _ in range(3):
        zoomed = settle(page, lambda: page.click("#zoom-in"))
    check(zoomed["range"][1] - zoomed["range"][0] < (whole[1] - whole[0]) / 4,
          f"zoom-in did not narrow the range: {whole} -> {zoomed['range']}")
    check(zoomed["level"] <= state["level"], "zooming in chose a coarser level")
    box = page.locator("#timeline").bounding_box()
    page.mouse.move(box["x"] + box["width"] * 0.6, box["y"] + box["height"] / 2)
    for _ in range(4):
        wheeled = settle(page, lambda: page.mouse.wheel(0, -300))
    check(wheeled["range"][1] - wheeled["range"][0] < zoomed["range"][1] - zoomed["range"][0],
          "the wheel did not zoom in")
    check(wheeled["tilesCached"] <= 64, f"{wheeled['tilesCached']} tiles kept (at most 64)")
    page.screenshot(path=os.path.join(shots, "zoomed.png"))
    # Drag to pan: the range moves, its width stays.
    page.mouse.move(box["x"] + box["width"] * 0.5, box["y"] + 40)
    page.mouse.down()

    def drag():
        page.mouse.move(box["x"] + box["width"] * 0.3, box["y"] + 40, steps=5)
        page.mouse.up()
    panned = settle(page, drag)
    width = wheeled["range"][1] - wheeled["range"][0]
    check(abs((panned["range"][1] - panned["range"][0]) - width) < 1e-6 * max(1, width) + 1,
          "panning changed the zoom")
    check(panned["range"][0] != wheeled["range"][0] or panned["range"][0] == 0,
          "dragging did not pan")
    reset = settle(page, lambda: page.click("#zoom-reset"))
    check(reset["range"] == whole, f"reset did not show the whole job: {reset['range']}")

    # The first OOM: its layout, its pinning blocks marked, a block's details.
    page.click("#oom-list li >> nth=0")
    page.wait_for_selector("#segment-map .block", timeout=30000)
    check("OOM" in page.inner_text("#layout-title"), "the OOM's layout is not titled so")
    check(page.inner_text("#oom-details").strip() != "", "the OOM's evidence is not shown")
    pins = page.locator("#segment-map .block.pinning")
    check(pins.count() >= 1, "no pinning block is marked on the map")
    pins.first.click()
    details = page.inner_text("#block-details")
    check("allocated at" in details and "event" in details, f"block details: {details!r}")
    check("MiB" in details or "GiB" in details or "KiB" in details, "the block's size is missing")
    # Who holds it: the demo's log names every block's module and op, and the OOM's request.
    check("module" in details and "aten::" in details, f"no module or op: {details!r}")
    check("Requested by: " in page.inner_text("#oom-details"), "the OOM's request is not named")
    check("Held by module: " in page.inner_text("#oom-details"), "no live bytes by module")
    page.screenshot(path=os.path.join(shots, "oom-selected.png"), full_page=True)
    # Its allocation event selects that moment.
    page.click("#alloc-event")
    page.wait_for_function(f"() => {STATE}.selectedEvent !== null")
    page.wait_for_selector("#segment-map .block", timeout=30000)

    # A moment clicked on the timeline: that event selected, a layout shown for it, and no block
    # marked as pinning there (the marks belong to the OOM's layout).
    alloc_event = page.evaluate(f"() => {STATE}.selectedEvent")
    page.locator("#timeline").scroll_into_view_if_needed()
    box = page.locator("#timeline").bounding_box()
    page.mouse.click(box["x"] + box["width"] * 0.45, box["y"] + box["height"] / 2)
    page.wait_for_function(f"() => {STATE}.selectedEvent !== {alloc_event}", timeout=30000)
    clicked = page.evaluate(f"() => {STATE}")
    low, high = clicked["range"]
    check(low + 0.3 * (high - low) < clicked["selectedEvent"] < low + 0.6 * (high - low),
          f"the click selected event {clicked['selectedEvent']} of {clicked['range']}")
    page.wait_for_function("() => !document.querySelector('#layout-title').textContent"
                           ".includes('OOM')", timeout=30000)
    page.wait_for_selector("#segment-map .segment", timeout=30000)
    check(page.locator("#segment-map .block.pinning").count() == 0,
          "pinning marks outlived their OOM's layout")
    page.screenshot(path=os.path.join(shots, "clicked.png"), full_page=True)
    check(not errors, f"console or page errors: {errors}")


def collect_errors(page):
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


def click_timeline(page, selector, share):
    page.locator(selector).scroll_into_view_if_needed()
    box = page.locator(selector).bounding_box()
    page.mouse.click(box["x"] + box["width"] * share, box["y"] + box["height"] / 2)


def run_ranks(page, url, shots):
    """A directory of ranks: the worst shown first, then each rank chosen by the selector or the
    cross-rank table; a moment clicked shows that rank's segments."""
    errors = collect_errors(page)
    page.goto(url)
    page.wait_for_function(SETTLED, timeout=30000)
    rows = page.locator("#rank-table tr.rank-row")
    check(rows.count() >= 3, f"{rows.count()} ranks in the cross-rank table")
    worst = page.locator("#rank-table tr.rank-row.selected")
    check(worst.count() == 1 and "worst" in worst.inner_text(),
          "the worst rank is not the one shown first")
    first = page.evaluate(f"() => {STATE}.source")
    check(page.locator("#oom-list li").count() >= 1, "the worst rank's OOM is not listed")
    check("rank" in page.inner_text("#title"), "the title does not name the rank")
    page.screenshot(path=os.path.join(shots, "ranks-worst.png"), full_page=True)
    # The selector: rank 0.
    page.select_option("#rank-select", "0")
    page.wait_for_function(f"() => {STATE}.source === 's0' && {STATE}.pendingTiles === 0 && "
                           f"{STATE}.tilesCached > 0", timeout=30000)
    check("rank 0 " in page.inner_text("#title"), f"title: {page.inner_text('#title')!r}")
    check("worst rank only" in page.inner_text("#sweep-table"),
          "a rank other than the worst does not say where the sweep is")
    # The table: a third rank (neither the worst nor rank 0); then a moment on its timeline.
    k = next(k for k in range(1, rows.count()) if f"s{k}" != first)
    rows.nth(k).click()
    page.wait_for_function(f"() => {STATE}.source === 's{k}' && {STATE}.tilesCached > 0",
                           timeout=30000)
    check(page.input_value("#rank-select") == str(k), "the selector does not follow the table")
    click_timeline(page, "#timeline", 0.5)
    page.wait_for_function(f"() => {STATE}.selectedEvent !== null", timeout=30000)
    page.wait_for_selector("#segment-map .segment", timeout=30000)
    page.screenshot(path=os.path.join(shots, "ranks-chosen.png"), full_page=True)
    check(not errors, f"console or page errors: {errors}")


def run_diff(page, url, shots):
    """Two traces side by side: the comparison, both timelines moving together aligned by phase,
    both layouts at a click, each trace's OOMs."""
    errors = collect_errors(page)
    page.goto(url)
    both = (f"() => {SETTLED[6:]} && {STATE}B && {STATE}B.tilesCached > 0 && "
            f"{STATE}B.pendingTiles === 0")
    page.wait_for_function(both, timeout=30000)
    table = page.inner_text("#diff-table")
    check("peak reserved" in table and "B − A" in table, f"comparison: {table!r}")
    check("B against A" in page.inner_text("#verdict"), "no one-line difference at the top")
    a0 = page.evaluate(f"() => {STATE}.range")
    b0 = page.evaluate(f"() => {STATE}B.range")
    for _ in range(2):
        settle(page, lambda: page.click("#zoom-in"))
    a1 = page.evaluate(f"() => {STATE}.range")
    page.wait_for_function(f"() => {STATE}B.range[1] - {STATE}B.range[0] < {b0[1] - b0[0]} / 3",
                           timeout=30000)
    check(a1[1] - a1[0] < (a0[1] - a0[0]) / 3, f"zoom did not narrow A: {a0} -> {a1}")
    # A phase both traces have: A shows it, B follows to its own start of that phase.
    rows = page.locator("#phase-table tr.phase-row")
    chosen = None
    for k in range(rows.count()):
        row = rows.nth(k)
        a_first, b_first = row.get_attribute("data-a-first"), row.get_attribute("data-b-first")
        if a_first and b_first and int(a_first) > 0 and int(a_first) != int(b_first):
            chosen = (row, int(a_first), int(b_first))
            break
    check(chosen is not None, "no phase of both traces that starts at different events")
    row, a_first, b_first = chosen
    row.click()
    page.wait_for_function(f"() => Math.abs({STATE}.range[0] - {a_first}) < 1 && "
                           f"Math.abs({STATE}B.range[0] - {b_first}) < 1", timeout=30000)
    page.screenshot(path=os.path.join(shots, "diff-phase.png"), full_page=True)
    # A click on A: both layouts.
    click_timeline(page, "#timeline", 0.5)
    page.wait_for_selector("#segment-map .segment", timeout=30000)
    page.wait_for_selector("#segment-map-b .segment", timeout=30000)
    check(page.inner_text("#layout-title").startswith("A: "), "A's layout is not labelled A")
    check(page.inner_text("#layout-title-b").startswith("B: "), "B's layout is not labelled B")
    # B's OOM: its pinning blocks on B's map.
    b_oom = page.locator("#oom-list li", has_text="B #1")
    check(b_oom.count() == 1, "B's OOM is not listed")
    b_oom.click()
    page.wait_for_selector("#segment-map-b .block.pinning", timeout=30000)
    check("OOM" in page.inner_text("#layout-title-b"), "B's OOM layout is not titled so")
    page.screenshot(path=os.path.join(shots, "diff-oom.png"), full_page=True)
    check(not errors, f"console or page errors: {errors}")


def run_hostile(page, url, shots):
    """A view whose phases and call sites are HTML: they show as text and nothing runs."""
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url)
    page.wait_for_function(SETTLED, timeout=30000)
    page.click("#oom-list li >> nth=0")
    page.wait_for_selector("#segment-map .block.pinning", timeout=30000)
    page.locator("#segment-map .block.pinning").first.click()
    details = page.inner_text("#block-details")
    check('<img src=x onerror="window.__pwned=1">' in details,
          f"the hostile call site is not shown as text: {details!r}")
    check("\\u202e" in details and "\\u001b" in details,
          f"bidirectional overrides and control characters are not made visible: {details!r}")
    check(page.evaluate("() => window.__pwned") is None, "a hostile string ran as HTML")
    check(page.locator("img").count() == 0, "a hostile string made an element")
    page.screenshot(path=os.path.join(shots, "hostile.png"), full_page=True)
    check(not errors, f"page errors: {errors}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--dir")
    where.add_argument("--url")
    parser.add_argument("--artifacts")
    parser.add_argument("--mode", choices=["trace", "ranks", "diff", "hostile"], default="trace",
                        help="what the view holds (hostile: view_browser_run.py's snapshot)")
    args = parser.parse_args()
    browser_path = shutil.which("chromium")
    if browser_path is None:
        print("SKIP: chromium is not installed")
        return 77
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("SKIP: python playwright is not installed")
        return 77
    shots = args.artifacts or tempfile.mkdtemp(prefix="fragscope-view-shots-")
    os.makedirs(shots, exist_ok=True)
    url = args.url or "file://" + os.path.join(os.path.abspath(args.dir), "index.html")
    with sync_playwright() as p:
        # No sandbox (CI runs as root); /tmp rather than a container's small /dev/shm.
        browser = p.chromium.launch(executable_path=browser_path,
                                    args=["--no-sandbox", "--disable-dev-shm-usage"])
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        try:
            {"trace": run, "ranks": run_ranks, "diff": run_diff,
             "hostile": run_hostile}[args.mode](page, url, shots)
        except Failure as failure:
            page.screenshot(path=os.path.join(shots, "failure.png"), full_page=True)
            print(f"FAIL: {failure} (screenshots in {shots})")
            return 1
        finally:
            browser.close()
    print(f"viewer page: all checks pass ({url}); screenshots in {shots}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
