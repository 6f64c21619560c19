"""The dashboard's files as larchd serves them (GET /, /ui/{file},
/vendor/{file}): types, the Content-Security-Policy and the other safety
headers, ETags, no inline script or style in the page, no HTML built from
strings in its scripts, and no way out of the folder whatever the path.
The browser tests are in test_dashboard.py."""
import json
import pathlib
import re

import pytest
import requests

from larchd import Larchd

ROOT = pathlib.Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "service" / "dashboard"
CHARTJS = pathlib.Path("/usr/share/javascript/chart.js/chart.min.js")
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; font-src 'self'; base-uri 'none'; form-action 'none'; "
       "frame-ancestors 'none'")
TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
         ".css": "text/css; charset=utf-8", ".svg": "image/svg+xml"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Larchd(tmp_path_factory.mktemp("static")).start()
    yield s
    s.stop()


def assert_dashboard_headers(r):
    assert r.headers["Content-Security-Policy"] == CSP
    assert r.headers["X-Content-Type-Options"] == "nosniff"
    assert r.headers["Referrer-Policy"] == "no-referrer"
    assert r.headers["X-Frame-Options"] == "DENY"
    assert r.headers["Cache-Control"] == "no-cache" and r.headers["ETag"]


def assets(html):
    """The same-origin files the page loads."""
    return re.findall(r'<(?:script|link)\b[^>]*?(?:src|href)="(/[^"]*)"', html)


def test_the_page_is_served_with_its_policy(server):
    r = requests.get(server.url + "/", timeout=10)
    assert r.status_code == 200
    assert r.headers["Content-Type"] == TYPES[".html"]
    assert_dashboard_headers(r)
    assert r.text == (DASHBOARD / "index.html").read_text()
    again = requests.get(server.url + "/", headers={"If-None-Match": r.headers["ETag"]},
                         timeout=10)
    assert again.status_code == 304 and again.content == b""
    head = requests.head(server.url + "/", timeout=10)
    assert head.status_code == 200 and head.content == b""
    assert requests.post(server.url + "/", timeout=10).status_code == 405


def test_every_file_the_page_loads_is_served_with_its_type(server):
    html = (DASHBOARD / "index.html").read_text()
    loaded = assets(html)
    assert "/vendor/chart.js" in loaded and any(p.endswith(".js") for p in loaded), loaded
    for path in loaded:
        r = requests.get(server.url + path, timeout=10)
        assert r.status_code == 200, (path, r.text[:200])
        assert r.headers["Content-Type"] == TYPES[pathlib.PurePath(path).suffix], path
        assert_dashboard_headers(r)
        if path.startswith("/ui/"):
            assert r.content == (DASHBOARD / path[4:]).read_bytes(), path
    chart = requests.get(server.url + "/vendor/chart.js", timeout=10)
    assert chart.content == CHARTJS.read_bytes()


def test_the_page_has_no_inline_script_or_style():
    html = (DASHBOARD / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", html):
        assert re.search(r'\bsrc="/', tag), f"inline script: {tag}"
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", html), "a script with a body"
    assert "<style" not in html and not re.search(r"\sstyle=", html)
    assert not re.search(r"\son[a-z]+=", html), "an inline event handler"


def test_the_scripts_never_build_html_from_strings():
    """Every user value reaches the page as text: the scripts make elements
    and set textContent, never parse HTML."""
    scripts = sorted(DASHBOARD.glob("*.js"))
    assert scripts
    for js in scripts:
        text = js.read_text()
        bad = re.search(r"\.(innerHTML|outerHTML|insertAdjacentHTML|createContextualFragment)\b"
                        r"|\bdocument\.write|\beval\(|\bnew Function\b|\.parseFromString\(",
                        text)
        assert not bad, f"{js.name} uses {bad.group(0)}"


def raw_get(url, path):
    """GET path exactly as written (requests and curl remove dot segments)."""
    import http.client
    import urllib.parse
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=10)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.getheader("Content-Type"), r.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", [
    "/ui/..%2F..%2F..%2Fetc%2Fpasswd", "/ui/%2e%2e", "/ui/..", "/ui/../state/larch.db",
    "/ui/%2e%2e%2fCMakeLists.txt", "/ui/.hidden.js", "/ui/README.md", "/ui/index.html/x",
    "/ui/", "/ui", "/ui/a%00.js", "/ui/a%2Fb.js", "/ui/app.js%00.html", "/ui/nothere.js",
    "/vendor/..%2Fchart.js", "/vendor/jquery.js", "/vendor/", "/ui/%5c..%5cx.js",
    "/ui/" + "a" * 70 + ".js", "/ui/a;b.js", "/ui/%20.js",
])
def test_no_path_leaves_the_folder(server, path):
    status, ctype, body = raw_get(server.url, path)
    assert status == 404, (path, status, body[:200])
    assert ctype == "application/json"
    assert json.loads(body)["error"]["code"] == "not_found"


def test_api_replies_are_not_sniffed(server):
    r = requests.get(server.url + "/healthz", timeout=10)
    assert r.headers["X-Content-Type-Options"] == "nosniff"


def test_a_dashboard_dir_is_read_at_each_request(tmp_path):
    ui = tmp_path / "ui"
    ui.mkdir()
    (ui / "index.html").write_text("<!doctype html><title>one</title>\n")
    (ui / "app.js").write_text("'use strict';\n")
    (tmp_path / "secret.js").write_text("secret\n")
    (ui / "link.js").symlink_to(tmp_path / "secret.js")
    (ui / "dir.js").mkdir()
    (ui / "big.js").write_bytes(b"/" * (8 * 1024 * 1024 + 1))
    server = Larchd(tmp_path, args=["--dashboard-dir", str(ui)]).start()
    try:
        r = requests.get(server.url + "/", timeout=10)
        assert r.status_code == 200 and "<title>one</title>" in r.text
        assert_dashboard_headers(r)
        (ui / "index.html").write_text("<!doctype html><title>two</title>\n")
        r2 = requests.get(server.url + "/", headers={"If-None-Match": r.headers["ETag"]},
                          timeout=10)
        assert r2.status_code == 200 and "<title>two</title>" in r2.text
        assert requests.get(server.url + "/ui/app.js", timeout=10).text == "'use strict';\n"
        for name in ("link.js", "dir.js", "big.js", "gone.js"):
            r = requests.get(f"{server.url}/ui/{name}", timeout=10)
            assert r.status_code == 404 and "secret" not in r.text, name
    finally:
        server.stop()


def test_without_chartjs_the_dashboard_says_what_is_missing(tmp_path):
    server = Larchd(tmp_path, args=["--chartjs-path", str(tmp_path / "none.js")]).start()
    try:
        server.wait_log(r"chartjs_path: .*none\.js: No such file or directory: the dashboard "
                        r"will show no charts \(install libjs-chart\.js\)")
        assert requests.get(server.url + "/", timeout=10).status_code == 200
        r = requests.get(server.url + "/vendor/chart.js", timeout=10)
        assert r.status_code == 404 and "libjs-chart.js" in r.json()["error"]["message"]
    finally:
        server.stop()
