#!/usr/bin/env python3
"""The viewer end to end: `fragscope view` of the demo's log, as files and served, opened in
Chromium (viewer_browser_test.py), and the server's answers to hostile paths; a directory of
ranks (the demo at three seeds, as snapshots named rank{r}.pickle) as files and served; two logs
side by side (--diff).

  view_browser_run.py FRAGSCOPE_BIN ARTIFACTS_DIR

Exit 77 (ctest: skipped) when Chromium or playwright is missing, with the reason.
"""
import http.client
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, check=True, **kw)


def raw_get(port, target):
    """GET with the target sent as is (no client-side normalization)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.putrequest("GET", target, skip_host=True, skip_accept_encoding=True)
    conn.endheaders()
    response = conn.getresponse()
    body = response.read()
    conn.close()
    return response.status, body


def check_server(port, view_dir):
    status, body = raw_get(port, "/")
    assert status == 200 and b"<html" in body.lower(), (status, body[:200])
    status, _ = raw_get(port, "/data/meta.js")
    assert status == 200, status
    secret = os.path.join(view_dir, "..", "secret.txt")
    with open(secret, "w") as f:
        f.write("not to be served")
    for target in ("/../secret.txt", "/data/../../secret.txt", "/%2e%2e/secret.txt",
                   "/..%2fsecret.txt", "/etc/passwd", "//etc/passwd", "/data/", "/index.html/.",
                   "/api/layout?event=-1", "/api/layout?event=x"):
        status, body = raw_get(port, target)
        assert status in (400, 404), (target, status)
        assert b"not to be served" not in body, target
    status, body = raw_get(port, "/api/layout?event=100")
    assert status == 200 and b'"maps"' in body, (status, body[:200])
    print("server: hostile paths refused, the layout API answers")


def check_sources(port):
    """A view of several traces: the layout API per source, and only for its sources."""
    status, body = raw_get(port, "/api/layout?source=s1&event=100")
    assert status == 200 and b'"maps"' in body, (status, body[:200])
    for target in ("/api/layout?source=s9&event=100", "/api/layout?source=../s1&event=100"):
        status, _ = raw_get(port, target)
        assert status in (400, 404), (target, status)
    status, _ = raw_get(port, "/data/s1/meta.js")
    assert status == 200, status
    print("server: the layout API answers per source")


def served(fragscope, args, test, artifacts, check):
    """`fragscope view ARGS --port 0`, its server checked by `check(port)` and the page by `test`;
    the server must end cleanly on SIGTERM."""
    server = subprocess.Popen([fragscope, "view"] + args + ["--port", "0"],
                              stdout=subprocess.PIPE, text=True)
    try:
        line = server.stdout.readline()
        print(line.strip())
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        if check:
            check(port)
        run(test + ["--url", f"http://127.0.0.1:{port}/", "--artifacts", artifacts])
    finally:
        server.terminate()
        code = server.wait(timeout=30)
    assert code == 0, f"the server ended with {code} on SIGTERM"


HOSTILE = '<img src=x onerror="window.__pwned=1">\u202e\x1b[31m'


def hostile_snapshot(path):
    """A PyTorch snapshot (as Python's pickle writes one; no torch) of a fragmentation OOM on a
    64 MiB device whose phase (user_metadata) and call sites (frames) are HTML and control
    characters: the page must show them as text."""
    import pickle
    mib = 1 << 20
    segments, trace = [], []
    t = [1_750_000_000_000_000]

    def entry(action, addr, size, **extra):
        t[0] += 1
        trace.append(dict(action=action, addr=addr, size=size, stream=0, time_us=t[0],
                          frames=[], user_metadata=HOSTILE, compile_context="N/A", **extra))
    frames = [{"filename": "/home/me/" + HOSTILE + ".py", "line": 7, "name": HOSTILE}]
    for base in (0x7F0000000000, 0x7F0001400000):
        entry("segment_alloc", base, 20 * mib)
        for k in range(4):
            entry("alloc", base + k * 5 * mib, 5 * mib)
        blocks = []
        for k in range(4):
            live = k % 2 == 1
            blocks.append({"address": base + k * 5 * mib, "size": 5 * mib,
                           "requested_size": 5 * mib if live else 0,
                           "state": "active_allocated" if live else "inactive",
                           "frames": frames if live else []})
        segments.append({"device": 0, "address": base, "total_size": 20 * mib,
                         "allocated_size": 10 * mib, "active_size": 10 * mib,
                         "requested_size": 10 * mib, "stream": 0, "segment_type": "large",
                         "segment_pool_id": (0, 0), "is_expandable": False, "frames": [],
                         "blocks": blocks})
    for base in (0x7F0000000000, 0x7F0001400000):
        for k in (0, 2):
            entry("free_requested", base + k * 5 * mib, 5 * mib)
            entry("free_completed", base + k * 5 * mib, 5 * mib)
    entry("oom", 0, 26 * mib, device_free=24 * mib)
    with open(path, "wb") as f:
        pickle.dump({"segments": segments, "device_traces": [trace]}, f)


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    fragscope, artifacts = sys.argv[1], sys.argv[2]
    if shutil.which("chromium") is None:
        print("SKIP: chromium is not installed (scripts/setup.sh installs it)")
        return 77
    try:
        import playwright  # noqa: F401
    except ImportError:
        print("SKIP: python playwright is not installed (scripts/setup.sh installs it)")
        return 77
    os.makedirs(artifacts, exist_ok=True)
    test = [sys.executable, os.path.join(HERE, "viewer_browser_test.py")]
    with tempfile.TemporaryDirectory(prefix="fragscope-view-") as tmp:
        log = os.path.join(tmp, "demo.fslog")
        run([fragscope, "demo", "--no-html", "--log", log], stdout=subprocess.DEVNULL)
        view = os.path.join(tmp, "view")
        run([fragscope, "view", log, "--out", view])
        run(test + ["--dir", view, "--artifacts", os.path.join(artifacts, "files")])

        served(fragscope, [log], test, os.path.join(artifacts, "served"),
               lambda port: check_server(port, view))

        # Hostile strings from a snapshot: shown as text, never run.
        snapshot = os.path.join(tmp, "hostile.pickle")
        hostile_snapshot(snapshot)
        hostile_view = os.path.join(tmp, "hostile")
        run([fragscope, "view", snapshot, "--capacity", "64MiB", "--out", hostile_view])
        run(test + ["--dir", hostile_view, "--mode", "hostile",
                    "--artifacts", os.path.join(artifacts, "hostile")])

        # The ranks of a job, and two logs side by side.
        ranks = os.path.join(tmp, "ranks")
        os.makedirs(ranks)
        logs = [log]
        for r, seed in enumerate((3, 4, 5)):
            rank_log = os.path.join(tmp, f"seed{seed}.fslog")
            run([fragscope, "demo", "--no-html", "--steps", "4", "--seed", str(seed),
                 "--log", rank_log], stdout=subprocess.DEVNULL)
            run([fragscope, "convert", rank_log, os.path.join(ranks, f"rank{r}.pickle")],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            logs.append(rank_log)
        ranks_view = os.path.join(tmp, "ranks-view")
        run([fragscope, "view", ranks, "--out", ranks_view])
        run(test + ["--dir", ranks_view, "--mode", "ranks",
                    "--artifacts", os.path.join(artifacts, "ranks")])
        served(fragscope, [ranks], test + ["--mode", "ranks"],
               os.path.join(artifacts, "ranks-served"), check_sources)
        diff_view = os.path.join(tmp, "diff-view")
        run([fragscope, "view", "--diff", logs[1], logs[3], "--out", diff_view])
        run(test + ["--dir", diff_view, "--mode", "diff",
                    "--artifacts", os.path.join(artifacts, "diff")])
        served(fragscope, ["--diff", logs[1], logs[3]], test + ["--mode", "diff"],
               os.path.join(artifacts, "diff-served"), None)
    print("viewer: files and server pass; screenshots in", artifacts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
