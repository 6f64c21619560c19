"""Webhooks (POST/GET/DELETE /v1/webhooks, deliveries) against a real larchd
and a real HTTP receiver on loopback (http.server in a thread): a signed
delivery per event, retries of a receiver that is down, slow or answers
500, failure after the bound, a kill -9 of larchd mid-delivery, the
allowlist and owner scope. https:// receivers (the same server wrapped in
Python's ssl, with certificates the openssl command makes here): larchd
trusts the module's CA through webhook_ca, sends SNI, and refuses a
certificate of another CA or for another host name.

Jobs run a stand-in trainer that exits at once: 1 when the spec's seed is
13 (the job fails), else 0. Each test has a user of its own, so that one
test's hooks never see another's jobs. The module's larchd retries fast
(backoff 100 ms to 200 ms, for 3 s; 1 s per attempt).
"""
import hashlib
import hmac
import json
import shutil
import socket
import ssl
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import requests

from larchd import Larchd, larchd_exe, stand_in_trainer
from test_api_jobs import JSON, Server, tiny_spec

FAKE = r'''
exec python3 -c '
import json, sys
sys.exit(1 if json.load(open("spec.json")).get("seed") == 13 else 0)
'
'''

FAST = ["--webhook-backoff-ms", "100", "--webhook-backoff-max-ms", "200",
        "--webhook-retry-for-s", "3", "--webhook-timeout-ms", "1000",
        "--webhook-connect-timeout-ms", "500", "--webhook-max-per-user", "3",
        "--run-as", "service"]   # jobs of made-up users run as larchd's own
SECRET = "s3cret-s3cret-s3cret"


class Receiver:
    """An HTTP server on 127.0.0.1 that records every request (headers,
    body) and answers what answer(n) returns for the n-th (0-based); answer
    may sleep or wait first."""

    def __init__(self, answer=lambda n: 200, port=0, tls=None):
        self.requests = []
        self.sni = []
        self.cond = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with outer.cond:
                    n = len(outer.requests)
                    outer.requests.append((self.path, dict(self.headers), body))
                    outer.cond.notify_all()
                status = answer(n)
                try:
                    self.send_response(status)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                except OSError:
                    pass   # larchd gave up on us (a timeout, a kill)

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hook?x=1"
        if tls:    # (certificate, key): https; a failed handshake drops the connection
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(*map(str, tls))
            ctx.sni_callback = lambda sock, name, c: self.sni.append(name)
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def wait(self, n, timeout=20):
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.requests) >= n, timeout), \
                f"{len(self.requests)} requests, waited for {n}"
            return list(self.requests)

    def stop(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_cert(d, name, ca, san):
    """A P-256 key and a certificate for san (an openssl subjectAltName)
    signed by the CA ca (a name made by make_ca)."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={name}", cwd=d)
    (d / f"{name}.ext").write_text(f"subjectAltName = {san}\nbasicConstraints = CA:FALSE\n"
                                   "extendedKeyUsage = serverAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key",
            "-CAcreateserial", "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext",
            cwd=d)
    return d / f"{name}.pem", d / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """The CA larchd trusts (webhook_ca), another it does not, and receiver
    certificates: for localhost and 127.0.0.1, of the other CA, for another
    host name."""
    if not shutil.which("openssl"):
        pytest.fail("the openssl command is missing (Debian: openssl)")
    d = tmp_path_factory.mktemp("webhook-pki")
    for ca in ("ca", "other"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                "-nodes", "-keyout", f"{ca}.key", "-out", f"{ca}.pem", "-days", "2", "-subj",
                f"/CN=larch webhook test {ca}", cwd=d)
    return {"ca": d / "ca.pem",
            "good": make_cert(d, "good", "ca", "DNS:localhost, IP:127.0.0.1"),
            "untrusted": make_cert(d, "untrusted", "other", "DNS:localhost, IP:127.0.0.1"),
            "elsewhere": make_cert(d, "elsewhere", "ca", "DNS:hooks.example.org")}


@pytest.fixture(scope="module")
def srv(tmp_path_factory, pki):
    tmp = tmp_path_factory.mktemp("webhooks")
    trainer = stand_in_trainer(tmp / "fake-train", FAKE)
    server = Server(tmp, ["--trainer-path", str(trainer), "--webhook-ca", str(pki["ca"])]
                    + FAST)
    server.trainer = trainer
    yield server
    server.stop()


def user(srv, name):
    return {**srv.d.auth(srv.make_user(name)), **JSON}


def create(srv, who, url, events=("job.completed",), secret=SECRET, status=201):
    r = srv.post("/v1/webhooks", who, {"url": url, "events": list(events), "secret": secret})
    assert r.status_code == status, r.text
    return r.json()


def deliveries(srv, who, hook):
    r = srv.get(f"/v1/webhooks/{hook}/deliveries", who)
    assert r.status_code == 200, r.text
    return r.json()["deliveries"]


def wait_delivery(srv, who, hook, done, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        ds = deliveries(srv, who, hook)
        if ds and done(ds[0]):
            return ds[0]
        assert time.monotonic() < deadline, ds
        time.sleep(0.05)


def check_signed(headers, body, event, hook_delivery=None):
    sig = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
    assert headers["X-Larch-Signature-256"] == sig
    assert headers["X-Larch-Event"] == event
    assert headers["Content-Type"] == "application/json"
    if hook_delivery:
        assert headers["X-Larch-Delivery"] == hook_delivery
    doc = json.loads(body)
    assert doc["type"] == event and doc["id"].startswith("ev-") and doc["time"].endswith("Z")
    return doc


def test_completed_job_gives_one_signed_delivery(srv):
    rx = Receiver()
    try:
        who = user(srv, "wh-done")
        hook = create(srv, who, rx.url)
        assert "secret" not in hook and hook["id"].startswith("wh-")
        assert hook["url"] == rx.url and hook["events"] == ["job.completed"]
        job = srv.submit(who, tiny_spec("done"))
        assert srv.wait(job, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
        d = wait_delivery(srv, who, hook["id"], lambda d: d["state"] != "pending")
        assert d["state"] == "delivered" and d["job"] == job and d["type"] == "job.completed"
        assert len(d["attempts"]) == 1
        assert d["attempts"][0]["status"] == 200 and d["attempts"][0]["error"] is None
        (path, headers, body), = rx.wait(1)
        assert path == "/hook?x=1"
        doc = check_signed(headers, body, "job.completed", d["id"])
        assert doc["id"] == d["event"]
        assert doc["job"]["id"] == job and doc["job"]["state"] == "COMPLETED"
        assert doc["job"]["owner"] == "wh-done"
        # one event, one delivery: the running state and the others were not asked for
        assert len(deliveries(srv, who, hook["id"])) == 1 and len(rx.requests) == 1
        got = srv.get(f"/v1/webhooks/{hook['id']}", who).json()
        assert got["deliveries"] == {"pending": 0, "delivered": 1, "failed": 0}
        assert "secret" not in got and SECRET not in srv.get("/v1/webhooks", srv.admin).text
    finally:
        rx.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_receiver_down_then_up_is_delivered_after_retry(srv):
    port = free_port()
    who = user(srv, "wh-down")
    hook = create(srv, who, f"http://127.0.0.1:{port}/", events=["job.failed"])
    job = srv.submit(who, tiny_spec("fails", seed=13))
    assert srv.wait(job, {"COMPLETED", "FAILED"})["state"] == "FAILED"
    d = wait_delivery(srv, who, hook["id"], lambda d: d["attempts"])
    assert d["state"] == "pending" and d["attempts"][0]["status"] is None
    assert "refused" in d["attempts"][0]["error"], d
    rx = Receiver(port=port)
    try:
        d = wait_delivery(srv, who, hook["id"], lambda d: d["state"] != "pending")
        assert d["state"] == "delivered", d
        assert d["attempts"][-1]["status"] == 200 and len(d["attempts"]) >= 2
        (_, headers, body), = rx.wait(1)
        assert check_signed(headers, body, "job.failed")["job"]["state"] == "FAILED"
    finally:
        rx.stop()


def test_slow_receiver_times_out_and_is_retried(srv):
    rx = Receiver(lambda n: (time.sleep(2), 200)[1] if n == 0 else 200)
    try:
        who = user(srv, "wh-slow")
        hook = create(srv, who, rx.url)
        job = srv.submit(who, tiny_spec("slow"))
        srv.wait(job, {"COMPLETED"})
        d = wait_delivery(srv, who, hook["id"], lambda d: d["state"] != "pending")
        assert d["state"] == "delivered", d
        first, last = d["attempts"][0], d["attempts"][-1]
        assert first["status"] is None and "within 1000 ms" in first["error"], first
        assert last["status"] == 200
        reqs = rx.wait(2)
        assert json.loads(reqs[0][2])["id"] == json.loads(reqs[1][2])["id"] == d["event"]
        assert reqs[0][2] == reqs[1][2]   # every attempt sends the same bytes
    finally:
        rx.stop()


def test_receiver_answering_500_is_retried_then_failed(srv):
    rx = Receiver(lambda n: 500)
    try:
        who = user(srv, "wh-500")
        hook = create(srv, who, rx.url)
        job = srv.submit(who, tiny_spec("five-hundred"))
        srv.wait(job, {"COMPLETED"})
        d = wait_delivery(srv, who, hook["id"], lambda d: d["state"] != "pending", timeout=30)
        assert d["state"] == "failed" and d["next_attempt"] is None
        assert len(d["attempts"]) >= 3
        assert all(a["status"] == 500 and a["error"] == "HTTP 500" for a in d["attempts"])
        assert len(rx.requests) == len(d["attempts"])
        got = srv.get(f"/v1/webhooks/{hook['id']}", who).json()
        assert got["deliveries"] == {"pending": 0, "delivered": 0, "failed": 1}
    finally:
        rx.stop()


def test_a_larchd_killed_mid_delivery_delivers_after_restart(tmp_path, srv):
    release = threading.Event()
    rx = Receiver(lambda n: (release.wait(30), 200)[1] if n == 0 else 200)
    d1 = Larchd(tmp_path, args=["--trainer-path", str(srv.trainer), "--run-as", "service",
                                "--webhook-timeout-ms", "60000"]).start()
    d2 = None
    try:
        who = {**d1.auth(), **JSON}
        r = requests.post(d1.url + "/v1/webhooks", headers=who, timeout=10,
                          json={"url": rx.url, "events": ["job.completed"], "secret": SECRET})
        assert r.status_code == 201, r.text
        hook = r.json()["id"]
        r = requests.post(d1.url + "/v1/jobs", headers=who, json=tiny_spec("k9"), timeout=10)
        assert r.status_code == 201, r.text
        first = rx.wait(1)[0]   # larchd is waiting for our answer now
        d1.proc.kill()
        d1.proc.wait(10)
        release.set()
        d2 = Larchd(tmp_path, args=["--trainer-path", str(srv.trainer), "--run-as", "service"],
                    state_dir=d1.state_dir).start()
        second = rx.wait(2)[1]
        assert first[2] == second[2]   # the same event (id and body), sent again
        assert first[1]["X-Larch-Delivery"] == second[1]["X-Larch-Delivery"]
        check_signed(second[1], second[2], "job.completed")
        deadline = time.monotonic() + 20
        while True:
            r = requests.get(f"{d2.url}/v1/webhooks/{hook}/deliveries", headers=who, timeout=10)
            d = r.json()["deliveries"][0]
            if d["state"] == "delivered":
                break
            assert time.monotonic() < deadline, d
            time.sleep(0.05)
        assert [a["status"] for a in d["attempts"]] == [200]   # the cut attempt left no row
    finally:
        release.set()
        if d2:
            d2.stop()
        if d1.running():
            d1.proc.kill()
        rx.stop()


def test_a_silent_receiver_holds_up_its_owners_deliveries_only(tmp_path, srv):
    # one attempt per user at a time, several users at once: alice's hook
    # never answers (held here, larchd waits a minute), bob's is delivered
    # meanwhile, and alice's second delivery waits behind her first
    release = threading.Event()
    silent = Receiver(lambda n: (release.wait(60), 200)[1])
    rx = Receiver()
    s = Server(tmp_path / "silent", ["--trainer-path", str(srv.trainer), "--run-as", "service",
                                     "--webhook-timeout-ms", "60000"])
    try:
        for who, url in ((s.alice, silent.url), (s.bob, rx.url)):
            r = s.post("/v1/webhooks", who, {"url": url, "events": ["job.completed"],
                                             "secret": SECRET})
            assert r.status_code == 201, r.text
        held = s.submit(s.alice, tiny_spec("held"))
        silent.wait(1)   # a sender is stuck on alice's receiver now
        second = s.submit(s.alice, tiny_spec("behind"))
        s.wait(second, {"COMPLETED"})
        job = s.submit(s.bob, tiny_spec("free"))
        (_, headers, body), = rx.wait(1)
        assert check_signed(headers, body, "job.completed")["job"]["id"] == job
        assert len(silent.requests) == 1 and not release.is_set()
        assert json.loads(silent.requests[0][2])["job"]["id"] == held
        release.set()
        assert json.loads(silent.wait(2)[1][2])["job"]["id"] == second
    finally:
        release.set()
        s.stop()
        silent.stop()
        rx.stop()


@pytest.mark.parametrize("body, field, message", [
    ({"url": "http://10.1.2.3:9/x", "events": ["job.completed"], "secret": SECRET}, "url",
     "10.1.2.3, which webhook_allow does not allow"),
    ({"url": "https://10.1.2.3/x", "events": ["job.completed"], "secret": SECRET}, "url",
     "10.1.2.3, which webhook_allow does not allow"),
    ({"url": "ftp://127.0.0.1/x", "events": ["job.completed"], "secret": SECRET}, "url",
     "must start with http:// or https://"),
    ({"url": "http://user:pw@127.0.0.1/x", "events": ["job.completed"], "secret": SECRET},
     "url", "credentials"),
    ({"url": "http://127.0.0.1:0/x", "events": ["job.completed"], "secret": SECRET}, "url",
     "port must be 1 to 65535"),
    ({"events": ["job.completed"], "secret": SECRET}, "url", "url: required"),
    ({"url": "http://127.0.0.1/x\r\nX-Evil: 1", "events": ["job.completed"],
      "secret": SECRET}, "url", "percent-encoded"),
    ({"url": "http://127.0.0.1/", "events": ["job.done"], "secret": SECRET}, "events",
     "events[0]: unknown event type \"job.done\""),
    ({"url": "http://127.0.0.1/", "events": [], "secret": SECRET}, "events", "non-empty"),
    ({"url": "http://127.0.0.1/", "events": ["job.failed", "job.failed"], "secret": SECRET},
     "events", "listed twice"),
    ({"url": "http://127.0.0.1/", "events": ["job.failed"]}, "secret", "secret: required"),
    ({"url": "http://127.0.0.1/", "events": ["job.failed"], "secret": "short"}, "secret",
     "16 to 256 bytes"),
    ({"url": "http://127.0.0.1/", "events": ["job.failed"], "secret": SECRET, "x": 1}, "x",
     "unknown field"),
])
def test_bad_webhooks_are_400(srv, body, field, message):
    r = srv.post("/v1/webhooks", srv.bob, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["detail"] == {"field": field} and message in err["message"], err


# ---- https:// receivers ----------------------------------------------------------


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1"])
def test_https_receiver_gets_the_signed_delivery(srv, pki, host):
    """Verified against webhook_ca, for the URL's host (a name, sent as
    SNI, or an address, matched against the certificate's IP entries)."""
    rx = Receiver(tls=pki["good"])
    try:
        who = user(srv, f"wh-https-{host.replace('.', '-')}")
        hook = create(srv, who, f"https://{host}:{rx.port}/hook?x=1")
        job = srv.submit(who, tiny_spec("https"))
        assert srv.wait(job, {"COMPLETED", "FAILED"})["state"] == "COMPLETED"
        d = wait_delivery(srv, who, hook["id"], lambda d: d["state"] != "pending")
        assert d["state"] == "delivered", d
        assert [a["status"] for a in d["attempts"]] == [200]
        (path, headers, body), = rx.wait(1)
        assert path == "/hook?x=1" and headers["Host"] == f"{host}:{rx.port}"
        assert check_signed(headers, body, "job.completed", d["id"])["job"]["id"] == job
        assert rx.sni == [None if host == "127.0.0.1" else host]
    finally:
        rx.stop()


@pytest.mark.parametrize("cert, host, error", [
    ("untrusted", "localhost", "tls: the certificate of localhost is not accepted: its issuer "
     "is not trusted (not in the system's certificates or webhook_ca)"),
    ("elsewhere", "127.0.0.1", "tls: the certificate of 127.0.0.1 is not accepted: it does "
     "not name 127.0.0.1"),
    ("elsewhere", "localhost", "tls: the certificate of localhost is not accepted: it does "
     "not name localhost"),
])
def test_https_receiver_with_a_bad_certificate_fails_the_delivery(srv, pki, cert, host, error):
    rx = Receiver(tls=pki[cert])
    try:
        who = user(srv, f"wh-{cert}-{host.replace('.', '-')}")
        hook = create(srv, who, f"https://{host}:{rx.port}/in", events=["job.failed"])
        job = srv.submit(who, tiny_spec("bad-cert", seed=13))
        assert srv.wait(job, {"COMPLETED", "FAILED"})["state"] == "FAILED"
        d = wait_delivery(srv, who, hook["id"], lambda d: d["state"] != "pending", timeout=30)
        assert d["state"] == "failed" and len(d["attempts"]) >= 2, d
        for a in d["attempts"]:
            assert a["status"] is None
            assert a["error"] == f"127.0.0.1:{rx.port}: {error}", a
        assert rx.requests == []          # nothing was sent over a connection we refused
        assert rx.sni[0] == (None if host == "127.0.0.1" else host)   # no SNI for an address
    finally:
        rx.stop()


def test_https_url_to_a_plain_http_receiver_fails_clearly(srv):
    rx = Receiver()
    try:
        who = user(srv, "wh-https-plain")
        hook = create(srv, who, f"https://127.0.0.1:{rx.port}/", events=["job.completed"])
        job = srv.submit(who, tiny_spec("https-plain"))
        srv.wait(job, {"COMPLETED"})
        d = wait_delivery(srv, who, hook["id"], lambda d: d["attempts"])
        assert d["attempts"][0]["status"] is None
        assert d["attempts"][0]["error"].startswith(f"127.0.0.1:{rx.port}: tls handshake: "), d
    finally:
        rx.stop()


def test_bad_webhook_ca_stops_larchd(tmp_path):
    bad = tmp_path / "not-a-ca.pem"
    bad.write_text("hello\n")
    for path, why in ((bad, "no PEM certificate in it"),
                      (tmp_path / "missing.pem", "No such file or directory")):
        p = subprocess.run([str(larchd_exe()), "--listen", "127.0.0.1:0", "--state-dir",
                            str(tmp_path / "state"), "--run-as", "service", "--webhook-ca",
                            str(path)], capture_output=True, text=True, timeout=30)
        assert p.returncode != 0
        assert f"webhook_ca {path}: {why}" in p.stderr, p.stderr


def test_names_resolving_to_loopback_are_allowed_and_hooks_are_capped(srv):
    who = user(srv, "wh-cap")
    ids = [create(srv, who, "http://localhost:9/", events=["job.held"])["id"]
           for _ in range(3)]
    r = srv.post("/v1/webhooks", who, {"url": "http://localhost:9/", "events": ["job.held"],
                                       "secret": SECRET})
    assert r.status_code == 400 and "webhook_max_per_user" in r.json()["error"]["message"]
    assert requests.delete(f"{srv.url}/v1/webhooks/{ids[0]}", headers=who,
                           timeout=10).status_code == 204
    create(srv, who, "http://localhost:9/", events=["job.held"])


def test_users_see_only_their_own_hooks(srv):
    alice, bob = user(srv, "wh-alice"), user(srv, "wh-bob")
    hook = create(srv, alice, "http://127.0.0.1:9/a", events=["job.running"])["id"]
    mine = srv.get("/v1/webhooks", alice).json()["webhooks"]
    assert [h["id"] for h in mine] == [hook]
    assert hook not in [h["id"] for h in srv.get("/v1/webhooks", bob).json()["webhooks"]]
    assert hook in [h["id"] for h in srv.get("/v1/webhooks", srv.admin).json()["webhooks"]]
    for path in (f"/v1/webhooks/{hook}", f"/v1/webhooks/{hook}/deliveries"):
        assert srv.get(path, bob).status_code == 404
        assert srv.get(path, srv.admin).status_code == 200
    assert requests.delete(f"{srv.url}/v1/webhooks/{hook}", headers=bob,
                           timeout=10).status_code == 404
    assert srv.get("/v1/webhooks/wh-nope", alice).status_code == 404
    assert requests.delete(f"{srv.url}/v1/webhooks/{hook}", headers=alice,
                           timeout=10).status_code == 204
    assert srv.get(f"/v1/webhooks/{hook}", alice).status_code == 404


def test_sweep_completed_is_sent_once_when_its_last_child_ends(srv):
    rx = Receiver()
    try:
        who = user(srv, "wh-sweep")
        hook = create(srv, who, rx.url, events=["sweep.completed", "job.completed"])
        r = srv.post("/v1/sweeps", who, {"name": "sw", "base": tiny_spec("x"),
                                         "axes": {"optimizer.lr": [0.01, 0.02, 0.03]}})
        assert r.status_code == 201, r.text
        sweep = r.json()["id"]
        d = wait_delivery(srv, who, hook["id"],
                          lambda d: d["type"] == "sweep.completed" and d["state"] != "pending")
        assert d["state"] == "delivered" and d["sweep"] == sweep
        reqs = rx.wait(4)
        types = sorted(json.loads(b)["type"] for _, _, b in reqs)
        assert types == ["job.completed"] * 3 + ["sweep.completed"]
        body = next(b for _, h, b in reqs if h["X-Larch-Event"] == "sweep.completed")
        doc = check_signed(dict(next(h for _, h, b in reqs if b == body)), body,
                           "sweep.completed")
        assert doc["sweep"]["id"] == sweep and doc["sweep"]["state"] == "COMPLETED"
        assert len(deliveries(srv, who, hook["id"])) == 4
    finally:
        rx.stop()
