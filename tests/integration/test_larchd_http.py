"""larchd's HTTP core against the real binary: health and the OpenAPI document,
404/405/413/415, hostile paths, garbage on the socket, a graceful stop with a
request in flight, concurrent clients, settings (flags, environment, file)."""
import concurrent.futures
import http.client
import json
import os
import re
import signal
import socket
import stat
import subprocess
import time

import pytest
import requests

from larchd import STATE_DIR_MODE, ROOT, Larchd, larchd, larchd_exe  # noqa: F401  (the fixture)

JSON = {"Content-Type": "application/json"}


def assert_error(response, status, code):
    """An error reply: the status, and the one error shape with this code."""
    assert response.status_code == status, response.text
    assert response.headers["Content-Type"] == "application/json"
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message", "detail"}
    assert body["error"]["code"] == code
    assert body["error"]["message"]
    return body["error"]


def raw_get(server, path, method="GET"):
    """A request with the path exactly as given (requests would normalise it)."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path)
        r = conn.getresponse()
        return r.status, r.read()
    finally:
        conn.close()


def test_healthz(larchd):
    r = requests.get(larchd.url + "/healthz")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    body = r.json()
    assert body["status"] == "ok"
    version = subprocess.run([larchd.exe, "--version"], capture_output=True, text=True).stdout
    assert re.fullmatch(rf"larchd {re.escape(body['version'])}( \(git [0-9a-f]+\))?\n", version)
    # pollers: the tag comes back as 304 with no body
    tag = r.headers["ETag"]
    again = requests.get(larchd.url + "/healthz", headers={"If-None-Match": tag})
    assert again.status_code == 304 and again.content == b""
    assert requests.head(larchd.url + "/healthz").status_code == 200
    larchd.wait_log(r"info  GET /healthz 200 \d+us 127\.0\.0\.1$")
    larchd.wait_log(r"info  HEAD /healthz 200 \d+us 127\.0\.0\.1$")


def documented_endpoints():
    """(METHOD, /path) of every row of docs/api.md's endpoint table."""
    rows = re.findall(r"^\| `(GET|POST|PUT|PATCH|DELETE) ([^`?]+)[^`]*` \|",
                      (ROOT / "docs" / "api.md").read_text(), re.M)
    assert len(rows) >= 13
    return rows


def test_openapi_describes_every_documented_endpoint(larchd):
    r = requests.get(larchd.url + "/v1/openapi.json")
    assert r.status_code == 200
    assert r.headers["Content-Type"] == "application/json"
    doc = r.json()
    # the served document is api/openapi.json, byte for byte
    assert r.content == (ROOT / "api" / "openapi.json").read_bytes()
    assert doc["openapi"].startswith("3.0.")
    for method, path in documented_endpoints():
        assert path in doc["paths"], f"{path} is not in openapi.json"
        assert method.lower() in doc["paths"][path], f"{method} {path} is not in openapi.json"
    # every error code of the contract is in the Error schema
    codes = doc["components"]["schemas"]["Error"]["properties"]["error"]["properties"]["code"]["enum"]
    cells = re.findall(r"^ *\| [0-9/]+ \| (.+?) \|", (ROOT / "docs" / "api.md").read_text(), re.M)
    documented = {code for cell in cells for code in re.findall(r"`([a-z_]+)`", cell)}
    assert len(documented) >= 13
    assert documented == set(codes)
    # every $ref resolves
    text = json.dumps(doc)
    for ref in set(re.findall(r'"\$ref": "#/([^"]+)"', text)):
        node = doc
        for part in ref.split("/"):
            node = node[part]


@pytest.mark.parametrize("path", ["/nope", "/v1", "/v1/jobs/j-000123/nope", "/healthz/x",
                                  "/HEALTHZ", "/v2/openapi.json"])
def test_unknown_route_404(larchd, path):
    assert_error(requests.get(larchd.url + path), 404, "not_found")


def test_known_path_other_method_405(larchd):
    for method, path in [("POST", "/healthz"), ("DELETE", "/healthz"), ("PUT", "/v1/openapi.json")]:
        r = requests.request(method, larchd.url + path)
        err = assert_error(r, 405, "method_not_allowed")
        assert r.headers["Allow"] == "GET, HEAD"
        assert err["detail"] == {"allow": "GET, HEAD"}


def test_body_over_limit_413_and_keeps_serving(larchd):
    ten_mib = b"[" + b" " * (10 << 20) + b"]"
    r = requests.post(larchd.url + "/healthz", data=ten_mib, headers=JSON)
    err = assert_error(r, 413, "too_large")
    assert err["detail"] == {"limit": 1 << 20}
    assert requests.get(larchd.url + "/healthz").status_code == 200


def test_413_is_sent_before_the_body(larchd):
    """The refusal comes on the headers alone: the 10 MiB are never sent."""
    with socket.create_connection(("127.0.0.1", larchd.port), timeout=10) as s:
        s.sendall(b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 10485760\r\n\r\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 413 ")
    assert b'"code":"too_large"' in reply
    assert requests.get(larchd.url + "/healthz").status_code == 200


def test_trickled_body_is_cut_off_after_request_timeout(tmp_path):
    """A body sent a few bytes at a time (each piece resets the idle timeout)
    is cut off request_timeout seconds after the request began: the
    connection is closed (libmicrohttpd takes no reply mid-body), the log
    says 408, nothing was stored, and others are served meanwhile."""
    server = Larchd(tmp_path, args=["--request-timeout", "1"]).start()
    try:
        body = b'{"name": "slow", "pad": "' + b"x" * 400 + b'"}'
        start = time.monotonic()
        closed_at = None
        with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
            s.sendall(b"POST /v1/jobs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                      b"Authorization: Bearer " + server.admin_token.encode() + b"\r\n"
                      b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n")
            for i in range(0, len(body), 20):
                assert requests.get(server.url + "/healthz").status_code == 200
                try:
                    s.sendall(body[i:i + 20])
                    time.sleep(0.25)
                    s.setblocking(False)
                    try:
                        if s.recv(4096) == b"":
                            closed_at = time.monotonic()
                            break
                    except BlockingIOError:
                        pass
                    finally:
                        s.setblocking(True)
                except OSError:
                    closed_at = time.monotonic()
                    break
        assert closed_at is not None, "the connection outlived the whole trickled body"
        assert closed_at - start >= 1             # not before the timeout
        server.wait_log(r"info  POST /v1/jobs 408 \d+us")
        r = requests.get(server.url + "/v1/jobs", headers=server.auth())
        assert r.json()["jobs"] == []             # nothing half-submitted
    finally:
        server.stop()


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-www-form-urlencoded",
                                          "application/json; charset=latin1", "application/jsonx"])
def test_wrong_content_type_415(larchd, content_type):
    headers = {"Content-Type": content_type} if content_type else {}
    r = requests.post(larchd.url + "/healthz", data=b'{"a": 1}', headers=headers)
    assert_error(r, 415, "unsupported_media_type")


def test_json_body_with_charset_is_accepted(larchd):
    r = requests.get(larchd.url + "/healthz", data=b"{}",
                     headers={"Content-Type": "application/json; charset=utf-8"})
    assert r.status_code == 200


@pytest.mark.parametrize("path", [
    "/v1/jobs/..", "/v1/jobs/../healthz", "/v1/jobs/%2e%2e/healthz", "/v1/jobs/%2E%2E",
    "/v1/jobs/j-000123%00", "/v1/jobs/%00", "/v1/jobs/j-1%00.json", "/healthz%00",
    "/v1/jobs/j-1%2F..%2F..%2Fhealthz", "/v1/jobs/j-1/../../healthz", "/./healthz",
    "/v1/jobs/" + "1" * 10000, "/v1/jobs/j-" + "0" * 200, "/v1/jobs/%zz", "/v1/jobs/a%0Ab",
    "//healthz", "/healthz/",
])
def test_hostile_paths_404(larchd, path):
    status, body = raw_get(larchd, path)
    assert status == 404, (path, body[:200])
    assert json.loads(body)["error"]["code"] == "not_found"


GARBAGE = [
    b"\x00\x01\x02\xff" * 64,
    b"GET\r\n\r\n",
    b"GET / HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\n\r\n",                              # no Host
    b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n",
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: abc\r\n\r\n",
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n",
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999999\r\n\r\n",
    b"POST /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100000 + b"\r\n\r\n",
    b"GET /" + b"a" * 100000 + b" HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Nul: a\x00b\r\n\r\n",
    b"GET /healthz?a=%00&b HTTP/1.1\r\nHost: x\r\n\r\n",
    b"G\xc3\xa9T /healthz HTTP/1.1\r\nHost: x\r\n\r\n",
    b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Len",             # cut short
    b"\r\n" * 5000,
]


def test_garbage_on_the_socket_does_not_crash_it(larchd):
    """Each payload gets an error reply, a closed connection, or (for bytes
    that never end a request line) a connection left to the idle timeout;
    larchd keeps serving either way."""
    for payload in GARBAGE:
        with socket.create_connection(("127.0.0.1", larchd.port), timeout=1) as s:
            try:
                s.sendall(payload)
                s.shutdown(socket.SHUT_WR)
                while s.recv(65536):
                    pass
            except OSError:             # reset, refused mid-send, or timed out
                pass
        assert larchd.running(), f"larchd died on {payload[:60]!r}"
        assert requests.get(larchd.url + "/healthz").status_code == 200
    # what reached the request log is printable
    assert all(line.isprintable() for line in larchd.log().splitlines())


def test_half_open_connections_do_not_block_others(larchd):
    """Clients that send half a request and stall hold a connection each,
    not a thread: others are served meanwhile."""
    stalled = []
    for _ in range(20):
        s = socket.create_connection(("127.0.0.1", larchd.port), timeout=10)
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        stalled.append(s)
    try:
        for _ in range(10):
            assert requests.get(larchd.url + "/healthz", timeout=5).status_code == 200
    finally:
        for s in stalled:
            s.close()


def test_sigterm_lets_the_in_flight_request_finish(tmp_path):
    server = Larchd(tmp_path, args=["--log-level", "debug"]).start()
    body = b'{"padding": "0123456789"}'
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as s:
        # a slow upload: headers and half the body, then SIGTERM
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % len(body) + body[:10])
        server.wait_log(r"GET /healthz: headers in$")
        server.signal(signal.SIGTERM)
        server.wait_log(r"stopping \(in flight: 1\)$")
        time.sleep(0.3)
        assert server.running(), "larchd stopped with a request in flight"
        # it no longer accepts connections
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=2).close()
        s.sendall(body[10:])
        reply = b""
        while b"\r\n\r\n" not in reply or not reply.endswith(b"}"):
            chunk = s.recv(4096)
            if not chunk:
                break
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 "), reply
    assert b'"status":"ok"' in reply
    assert server.wait(timeout=10) == 0
    log = server.log()
    assert re.search(r"GET /healthz 200 \d+us 127\.0\.0\.1\n", log)
    assert log.rstrip().endswith("stopped")


def test_sigint_stops_it_too(tmp_path):
    server = Larchd(tmp_path).start()
    server.signal(signal.SIGINT)
    assert server.wait(timeout=10) == 0


def test_concurrent_clients(larchd):
    def client(n):
        with requests.Session() as session:
            codes = [session.get(larchd.url + ("/healthz" if i % 3 else "/nope")).status_code
                     for i in range(n)]
        return codes

    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        results = list(pool.map(client, [50] * 16))
    for codes in results:
        assert codes == [404 if i % 3 == 0 else 200 for i in range(50)]
    # one log line per request (written as each completes)
    deadline = time.monotonic() + 10
    while larchd.log().count("GET /healthz 200") < 16 * 33 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert larchd.log().count("GET /healthz 200") == 16 * 33


# ---- settings ----------------------------------------------------------------

def run_larchd(*args, env=None, timeout=10):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("LARCHD_")}
    full_env.update(env or {})
    return subprocess.run([str(larchd_exe()), *args], capture_output=True, text=True,
                          env=full_env, timeout=timeout)


def test_help_and_version():
    out = run_larchd("--help")
    assert out.returncode == 0
    for flag in ["--listen HOST:PORT", "--state-dir DIR", "--config FILE", "--log-level LEVEL",
                 "--log-file FILE", "--body-limit SIZE", "--threads N", "--version"]:
        assert flag in out.stdout
    out = run_larchd("--version")
    assert out.returncode == 0 and re.fullmatch(r"larchd \d+\.\d+\.\d+( \(git [0-9a-f]+\))?\n",
                                                out.stdout)


def test_every_key_is_in_the_example_config():
    example = (ROOT / "deploy" / "larchd.conf.example").read_text()
    keys = re.findall(r"^  --([a-z-]+) [A-Z:]+ ", run_larchd("--help").stdout, re.M)
    assert len(keys) >= 10
    for key in keys:
        if key != "config":
            assert re.search(rf"^#? ?{key.replace('-', '_')} = ", example, re.M), key


@pytest.mark.parametrize("args, env, message", [
    (["--listen", "nope"], {}, "--listen: must be HOST:PORT"),
    (["--listen", "127.0.0.1:70000"], {}, "--listen: must be HOST:PORT"),
    (["--listen", "no.such.host.invalid:80"], {}, "listen: cannot resolve"),
    (["--body-limit", "0"], {}, "--body-limit: must be a size"),
    (["--body-limit", "1X"], {}, "--body-limit: must be a size"),
    (["--gpu-memory", "80G,small"], {}, "--gpu-memory: must be a size in [1M, 16T]"),
    (["--gpu-memory", "small=40G"], {}, "--gpu-memory: must be a size"),
    (["--gpu-memory", "80G,../x=40G"], {}, "--gpu-memory: must be a size"),
    (["--threads", "-1"], {}, "--threads: must be an integer in [1, 1024] or auto"),
    (["--log-level", "loud"], {}, "--log-level: must be error, warn, info or debug"),
    (["--bogus"], {}, "unknown option --bogus"),
    (["--listen"], {}, "--listen: needs a value"),
    (["extra"], {}, 'unexpected argument "extra"'),
    ([], {"LARCHD_LOG_LEVEL": "loud"}, "LARCHD_LOG_LEVEL: must be error, warn, info or debug"),
    ([], {"LARCHD_MAX_CONNECTIONS": "0"}, "LARCHD_MAX_CONNECTIONS: must be an integer"),
    (["--config", "/nonexistent/larchd.conf"], {}, "config file /nonexistent/larchd.conf:"),
])
def test_bad_settings_exit_2(args, env, message):
    out = run_larchd(*args, env=env)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr
    assert out.stderr.startswith("larchd: ")


def test_bad_config_file_lines(tmp_path):
    conf = tmp_path / "larchd.conf"
    for text, message in [("listen 127.0.0.1:0\n", ":1: expected key = value"),
                          ("# comment\n\nsurprise = 1\n", ':3: unknown key "surprise"'),
                          ("threads = 2\nthreads = 3\n", ":2: threads is already set on line 1"),
                          ("body_limit = lots\n", ":1: body_limit: must be a size")]:
        conf.write_text(text)
        out = run_larchd("--config", str(conf))
        assert out.returncode == 2
        assert f"larchd: {conf}{message}" in out.stderr


def post_4k(server):
    return requests.get(server.url + "/healthz", data=b"[" + b" " * 4096 + b"]", headers=JSON)


def test_precedence_flags_env_file(tmp_path):
    """body_limit from the file, overridden by the environment, overridden
    by a flag; seen through which 4 KiB bodies get a 413."""
    conf = tmp_path / "larchd.conf"
    conf.write_text("# larchd settings\nbody_limit = 2K\nlog_level = warn\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("LARCHD_")}

    cases = [({}, [], 413), ({"LARCHD_BODY_LIMIT": "8K"}, [], 200),
             ({"LARCHD_BODY_LIMIT": "8K"}, ["--body-limit", "2048"], 413),
             ({"LARCHD_BODY_LIMIT": "2K"}, ["--body-limit=1M"], 200)]
    for i, (extra_env, flags, want) in enumerate(cases):
        run_dir = tmp_path / f"run{i}"
        run_dir.mkdir()
        server = Larchd(run_dir, args=["--config", str(conf), *flags], env={**env, **extra_env})
        server.start()
        try:
            assert post_4k(server).status_code == want, (extra_env, flags)
        finally:
            server.stop()
        # log_level = warn from the file: no request lines
        assert "GET /healthz" not in server.log()

    # LARCHD_CONFIG names the file when --config does not
    server = Larchd(tmp_path / "run0", env={**env, "LARCHD_CONFIG": str(conf)}).start()
    try:
        assert post_4k(server).status_code == 413
    finally:
        server.stop()


def test_log_file_and_state_dir(tmp_path):
    state = tmp_path / "a" / "b" / "state"
    log = tmp_path / "larchd.log"
    server = Larchd(tmp_path, state_dir=state, args=["--log-file", str(log), "--log-level", "debug"])
    server.start()
    try:
        assert requests.get(server.url + "/nope").status_code == 404
    finally:
        server.stop()
    assert stat.S_IMODE(state.stat().st_mode) == STATE_DIR_MODE
    text = log.read_text()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z info  GET /nope 404 \d+us 127\.0\.0\.1$", text, re.M)
    assert "listening on http://127.0.0.1:" in text
    assert server.log() == ""           # nothing on stderr


def test_port_in_use_exits_1(larchd, tmp_path):
    out = run_larchd("--listen", f"127.0.0.1:{larchd.port}", "--state-dir", str(tmp_path / "s"))
    assert out.returncode == 1
    assert f"127.0.0.1:{larchd.port}: Address already in use" in out.stderr
