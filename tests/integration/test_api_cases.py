"""Hostile and malformed requests against larchd, data-driven: every case in
tests/integration/api_cases/*.json is one request with the status and error
code it must get (docs/api.md). One larchd for the module; its trainer is a
stand-in that exits 1 at once, so a valid submission fails instead of
training (and one job named "holder" sleeps, so that its job token stays
live for the job-token cases).

A case:

    {"name": "...", "method": "POST", "path": "/v1/jobs",
     "headers": {"Content-Type": null, ...},      (null: leave it out)
     "body": <a JSON value> | {"raw": "text"} | {"generate": "10MiB"},
     "spec": {"batch.global": "256"}, "spec_delete": ["model"],
                                   (instead of body: the valid base spec, changed)
     "auth": "admin" | "alice" | "bob" | "none" | "revoked" | "job:<job>"
             | any other text: the Authorization header itself,
     "status": 400, "code": "invalid_spec", "message": "substring",
     "detail": {"field": "name"}, "allow": "GET, HEAD"}

Strings may hold placeholders: {job_alice} {job_bob} {job_holder} (ids),
{token_alice} {token_admin} {token_holder}, {marker} (a file no request may
create), {repeat:TEXT:N} (TEXT N times). A case with status 201 submits a
job; the last test checks that exactly those (and the fixture's) are stored.
Requests go over a plain socket, so paths reach the server as written.
"""
import http.client
import json
import pathlib
import re
import select
import socket
import sqlite3
import subprocess
import time

import pytest
import requests

from larchd import Larchd, stand_in_trainer
from test_larchd_http import assert_error

CASES_DIR = pathlib.Path(__file__).resolve().parent / "api_cases"
FIVE_XX = re.compile(r" [A-Z]+ \S+ 5\d\d \d+us")
PLACEHOLDER = re.compile(r"\{(repeat):([^:{}]*):(\d+)\}|\{([a-z_]+)\}")
SIZES = {"KiB": 1 << 10, "MiB": 1 << 20}


def base_spec(name="ok"):
    return {"name": name, "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 30}


def load_cases():
    cases = []
    for path in sorted(CASES_DIR.glob("*.json")):
        for case in json.loads(path.read_text()):
            case["file"] = path.name
            cases.append(case)
    names = [c["name"] for c in cases]
    dup = {n for n in names if names.count(n) > 1}
    assert not dup, f"case names used twice: {sorted(dup)}"
    return cases


CASES = load_cases()

TRAINER = """# a stand-in for larch-train: keeps the job token, then fails at once
# (or, for the job named "holder", sleeps so the token stays live)
printf '%s' "$LARCH_JOB_TOKEN" > "{dir}/$LARCH_JOB_ID.tmp"
/bin/mv "{dir}/$LARCH_JOB_ID.tmp" "{dir}/$LARCH_JOB_ID"
case "$(/bin/cat "$2")" in *'"holder"'*) exec /bin/sleep 300;; esac
exit 1
"""


class Server:
    """The module's larchd with users alice and bob, a revoked token, and
    three jobs: alice's and bob's (FAILED) and alice's "holder" (RUNNING)."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.tokens_dir = tmp / "job-tokens"
        self.tokens_dir.mkdir()
        self.tokens_dir.chmod(0o1777)       # the jobs run as alice and bob, who leave them
        trainer = tmp / "fake-train"
        stand_in_trainer(trainer, TRAINER.replace("{dir}", str(self.tokens_dir)))
        self.marker = tmp / "pwned-marker"
        self.d = Larchd(tmp, args=["--trainer-path", str(trainer), "--max-local-jobs", "4"])
        self.d.start()
        self.port = self.d.port
        self.tokens = {"admin": self.d.admin_token, "alice": self.make_user("alice"),
                       "bob": self.make_user("bob")}
        self.tokens["revoked"] = self.revoked_token()
        self.submitted = set()
        self.jobs = {"alice": self.submit("alice", base_spec("fixture-alice")),
                     "bob": self.submit("bob", base_spec("fixture-bob")),
                     "holder": self.submit("alice", base_spec("holder"))}
        for who in ("alice", "bob"):
            self.wait_state(self.jobs[who], {"FAILED"})
        self.wait_state(self.jobs["holder"], {"RUNNING"})
        for who in ("alice", "holder"):
            self.tokens[f"job:{who}"] = self.job_token(self.jobs[who])

    def admin_cmd(self, *args):
        out = subprocess.run([str(self.d.exe), *args, "--state-dir", str(self.d.state_dir)],
                             capture_output=True, text=True, timeout=10)
        assert out.returncode == 0, out.stderr
        return out

    def make_user(self, user):
        token = self.admin_cmd("token", "create", "--user", user, "--role", "user").stdout.strip()
        assert re.fullmatch(r"lt_[0-9a-f]{64}", token)
        return token

    def revoked_token(self):
        out = self.admin_cmd("token", "create", "--user", "carol", "--role", "user")
        token_id = re.search(r"token (\d+) for carol", out.stderr).group(1)
        self.admin_cmd("token", "revoke", token_id)
        return out.stdout.strip()

    def headers(self, who="admin"):
        return {"Authorization": f"Bearer {self.tokens[who]}"}

    def submit(self, who, spec):
        r = requests.post(self.d.url + "/v1/jobs", json=spec, headers=self.headers(who),
                          timeout=10)
        assert r.status_code == 201, r.text
        self.submitted.add(r.json()["id"])
        return r.json()["id"]

    def wait_state(self, job_id, states, timeout=20):
        deadline = time.monotonic() + timeout
        while True:
            r = requests.get(f"{self.d.url}/v1/jobs/{job_id}", headers=self.headers(),
                             timeout=10)
            assert r.status_code == 200, r.text
            if r.json()["state"] in states:
                return
            assert time.monotonic() < deadline, f"{job_id}: {r.json()['state']}, not {states}"
            time.sleep(0.05)

    def job_token(self, job_id, timeout=20):
        path = self.tokens_dir / job_id
        deadline = time.monotonic() + timeout
        while not path.exists():
            assert time.monotonic() < deadline, f"{job_id}: the trainer left no token"
            time.sleep(0.05)
        token = path.read_text()
        assert re.fullmatch(r"lt_[0-9a-f]{64}", token), token
        return token

    def expand(self, value):
        """The case's value with its placeholders filled in, recursively."""
        if isinstance(value, str):
            return PLACEHOLDER.sub(self.placeholder, value)
        if isinstance(value, list):
            return [self.expand(v) for v in value]
        if isinstance(value, dict):
            return {self.expand(k): self.expand(v) for k, v in value.items()}
        return value

    def placeholder(self, m):
        if m.group(1):
            return m.group(2) * int(m.group(3))
        key = m.group(4)
        if key.startswith("job_") and key[4:] in self.jobs:
            return self.jobs[key[4:]]
        if key.startswith("token_"):
            who = key[6:]
            return self.tokens.get(who) or self.tokens[f"job:{who}"]
        if key == "marker":
            return str(self.marker)
        return m.group(0)

    def stop(self):
        requests.post(f"{self.d.url}/v1/jobs/{self.jobs['holder']}/cancel",
                      headers=self.headers(), timeout=10)
        self.d.stop()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("cases"))
    yield s
    s.stop()


def spec_body(case):
    """The base spec with the case's changes: dotted keys set, deleted ones gone."""
    spec = base_spec(re.sub(r"[^A-Za-z0-9_.-]", "-", case["name"])[:64])
    for dotted, value in case.get("spec", {}).items():
        *parents, last = dotted.split(".")
        obj = spec
        for p in parents:
            obj = obj.setdefault(p, {})
        obj[last] = value
    for dotted in case.get("spec_delete", []):
        *parents, last = dotted.split(".")
        obj = spec
        for p in parents:
            obj = obj[p]
        del obj[last]
    return spec


def request_bytes(server, case):
    """(method, path, headers, body bytes or None) of a case."""
    method = case.get("method", "GET")
    path = server.expand(case["path"])
    body = None
    if "spec" in case or "spec_delete" in case:
        body = json.dumps(server.expand(spec_body(case))).encode()
    elif "body" in case:
        b = case["body"]
        if isinstance(b, dict) and set(b) == {"raw"}:
            body = server.expand(b["raw"]).encode("utf-8", "surrogateescape")
        elif isinstance(b, dict) and set(b) == {"generate"}:
            n, unit = re.fullmatch(r"(\d+)(KiB|MiB)", b["generate"]).groups()
            body = b"x" * (int(n) * SIZES[unit])
        else:
            body = json.dumps(server.expand(b)).encode()
    headers = {}
    auth = case.get("auth", "admin")
    if auth in server.tokens:
        headers["Authorization"] = f"Bearer {server.tokens[auth]}"
    elif auth != "none":
        headers["Authorization"] = server.expand(auth)
    if body is not None:
        headers["Content-Type"] = "application/json"
    for name, value in case.get("headers", {}).items():
        if value is None:
            headers.pop(name, None)
        else:
            headers[name] = server.expand(value)
    return method, path, headers, body


def send(server, method, path, headers, body):
    """One request on its own connection; (status, headers, body bytes). A
    big body goes out only if no answer came on the headers alone."""
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
    try:
        head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        for name, value in headers.items():
            head += f"{name}: {value}\r\n"
        if body is not None:
            head += f"Content-Length: {len(body)}\r\n"
        sock.sendall(head.encode("utf-8") + b"\r\n")
        if body is not None:
            early = len(body) > 65536 and select.select([sock], [], [], 1.0)[0]
            if not early:
                try:
                    sock.sendall(body)
                except (BrokenPipeError, ConnectionResetError):
                    pass
        resp = http.client.HTTPResponse(sock, method=method)
        resp.begin()
        return resp.status, resp.headers, resp.read()
    finally:
        sock.close()


class Reply:
    """What assert_error needs of a requests.Response."""

    def __init__(self, status, headers, content):
        self.status_code, self.headers, self.content = status, headers, content
        self.text = content.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.content)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_case(server, case):
    method, path, headers, body = request_bytes(server, case)
    status, reply_headers, content = send(server, method, path, headers, body)
    reply = Reply(status, reply_headers, content)
    expected = case["status"]
    if "code" in case:
        error = assert_error(reply, expected, case["code"])
        if "message" in case:
            assert case["message"] in error["message"], error
        for key, value in case.get("detail", {}).items():
            assert error["detail"].get(key) == value, error
    else:
        assert status == expected, reply.text
    if "allow" in case:
        assert reply_headers["Allow"] == case["allow"]
    if status == 201:
        job = reply.json()
        server.submitted.add(job["id"])
        assert reply_headers["Location"] == f"/v1/jobs/{job['id']}"
        if "spec" in case or "spec_delete" in case:
            sent = json.loads(body)
            assert job["name"] == sent.get("name", "job")   # echoed byte for byte
    assert not server.marker.exists(), "a request ran a shell command"
    assert not pathlib.Path("/tmp/pwned").exists(), "a request ran a shell command"


def test_after_all_cases(server):
    """The server survived: it answers, logged no 5xx, its database is sound,
    and it stores exactly the jobs that were accepted."""
    r = requests.get(server.d.url + "/healthz", timeout=10)
    assert r.status_code == 200
    assert server.d.running()
    assert not FIVE_XX.search(server.d.log()), [
        line for line in server.d.log().splitlines() if FIVE_XX.search(line)]
    db = sqlite3.connect(f"file:{server.d.state_dir / 'larch.db'}?mode=ro", uri=True)
    try:
        assert db.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        db.close()
    ids, cursor = set(), None
    while True:
        params = {"limit": 500, **({"cursor": cursor} if cursor else {})}
        r = requests.get(server.d.url + "/v1/jobs", params=params, headers=server.headers(),
                         timeout=10)
        assert r.status_code == 200, r.text
        ids |= {job["id"] for job in r.json()["jobs"]}
        cursor = r.json().get("next_cursor")
        if not cursor:
            break
    assert ids == server.submitted
    assert not server.marker.exists() and not pathlib.Path("/tmp/pwned").exists()
