#!/usr/bin/env python3
"""The viewer end to end: `fragscope view` of the demo's log, as files and served, opened in
Chromium (viewer_browser_test.py), and the server's answers to hostile paths.

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

        server = subprocess.Popen([fragscope, "view", log, "--port", "0"], stdout=subprocess.PIPE,
                                  text=True)
        try:
            line = server.stdout.readline()
            print(line.strip())
            port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
            check_server(port, view)
            run(test + ["--url", f"http://127.0.0.1:{port}/",
                        "--artifacts", os.path.join(artifacts, "served")])
        finally:
            server.terminate()
            code = server.wait(timeout=30)
        assert code == 0, f"the server ended with {code} on SIGTERM"
    print("viewer: files and server pass; screenshots in", artifacts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
