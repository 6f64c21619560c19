"""Running a real larchd for the integration tests.

`Larchd` starts the built binary (LARCH_BUILD_DIR, else build/) on
127.0.0.1:0 with a temporary state dir, reads the port from the line it
prints ("larchd: listening on http://127.0.0.1:PORT"), and stops it with
SIGTERM, expecting exit status 0. Its log (stderr) goes to a file the test
can read. The `larchd` fixture gives a started one per test:

    from larchd import larchd  # noqa: F401  (the fixture)

    def test_x(larchd):
        requests.get(larchd.url + "/healthz")
"""
import http.server
import os
import pathlib
import re
import select
import signal
import subprocess
import threading
import time

import pytest

import unix_users

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("LARCH_BUILD_DIR", ROOT / "build"))
# the state dir's mode on larchd's defaults: run as root, jobs run as their
# owners, who pass through it to their job directories (0711); else 0700
STATE_DIR_MODE = 0o711 if os.geteuid() == 0 else 0o700
# the loopback address, or another of this machine's given by --listen (the
# multi-node cluster's bridge: tests/integration/test_multinode.py)
LISTENING = re.compile(r"^larchd: listening on (https?)://(127\.0\.0\.1|\[::1\]|[0-9.]+):(\d+)$")


def poll(fetch, done, timeout, why, interval=0.1):
    """Calls fetch() until done(value) holds and returns that value; past
    timeout seconds the test fails with why(value)."""
    deadline = time.monotonic() + timeout
    while True:
        value = fetch()
        if done(value):
            return value
        assert time.monotonic() < deadline, why(value)
        time.sleep(interval)


class StubServer:
    """A stand-in HTTP server on 127.0.0.1:0 in a thread, for a client under
    test (larch, the trainer's reporter): serve(Handler) starts it at
    self.url, close() stops it."""

    def serve(self, handler):
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


def send_json(handler, status, data):
    """Answers a BaseHTTPRequestHandler's request with data (JSON bytes)."""
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def larchd_exe():
    exe = BUILD / "service" / "larchd"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build with -DWITH_SERVICE=ON first")
    return exe


# every larchd started, so that the session ends none left running (a
# fixture whose setup failed after start never reaches its stop)
STARTED = []


class Larchd:
    def __init__(self, tmp_path, args=(), env=None, state_dir=None):
        self.exe = larchd_exe()
        self.state_dir = pathlib.Path(state_dir or tmp_path / "state")
        self.log_path = tmp_path / "larchd.stderr"
        self.args = list(args)
        self.env = dict(os.environ if env is None else env)
        self.proc = None
        self._tokens = {}               # user_token's
        self.port = None
        self.url = None

    @property
    def owner_mode(self):
        """Whether jobs run as their owners (run_as owner: the default as root)."""
        args = " ".join(self.args)
        if "--run-as service" in args or "--run-as=service" in args:
            return False
        return os.geteuid() == 0

    def start(self, timeout=15):
        """Starts larchd and waits for its listening line; returns self."""
        if self.owner_mode:
            # jobs run as the test users: they must exist and reach their job
            # directories and the trainer
            unix_users.ensure()
            self.state_dir.parent.mkdir(parents=True, exist_ok=True)
            unix_users.make_reachable(self.state_dir.parent)
            unix_users.make_reachable(BUILD / "trainer")
        cmd = [str(self.exe), "--listen", "127.0.0.1:0", "--state-dir", str(self.state_dir)]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(cmd + self.args, stdout=subprocess.PIPE, stderr=log,
                                         env=self.env)
        STARTED.append(self)
        deadline = time.monotonic() + timeout
        line = b""
        while b"\n" not in line:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self.proc.stdout], [], [], max(left, 0))
            if not ready:
                self.proc.kill()
                pytest.fail(f"larchd printed no listening line in {timeout}s: {self.log()}")
            chunk = os.read(self.proc.stdout.fileno(), 4096)
            if not chunk:
                code = self.proc.wait()
                pytest.fail(f"larchd exited with {code} before listening: {self.log()}")
            line += chunk
        m = LISTENING.match(line.decode().split("\n")[0].strip())
        assert m, f"unexpected first line {line!r}"
        self.port = int(m.group(3))
        host = "127.0.0.1" if m.group(2) == "[::1]" else m.group(2)
        self.url = f"{m.group(1)}://{host}:{self.port}"
        return self

    @property
    def admin_token(self):
        """The admin token larchd made on its first start."""
        return (self.state_dir / "admin.token").read_text().strip()

    def user_token(self, name, role="user"):
        """A token for user name, made with `larchd token create` on first
        use and kept for the next call."""
        tokens = self._tokens
        if name not in tokens:
            out = subprocess.run([str(self.exe), "token", "create", "--user", name, "--role", role,
                                  "--state-dir", str(self.state_dir)],
                                 capture_output=True, text=True, timeout=10)
            assert out.returncode == 0, out.stderr
            tokens[name] = out.stdout.strip()
        return tokens[name]

    def auth(self, token=None):
        """Headers with a bearer token (the admin's unless one is given)."""
        return {"Authorization": f"Bearer {token or self.admin_token}"}

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def signal(self, signo=signal.SIGTERM):
        self.proc.send_signal(signo)

    def wait(self, timeout=30):
        """Waits for larchd to exit; returns its exit status."""
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.proc.stdout.close()

    def stop(self, timeout=30):
        """SIGTERM, then the exit status (which must be 0)."""
        if self.proc is None or self.proc.returncode is not None:
            return self.proc.returncode if self.proc else None
        self.signal(signal.SIGTERM)
        try:
            code = self.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            pytest.fail(f"larchd did not stop within {timeout}s of SIGTERM")
        assert code == 0, f"larchd exited with {code} after SIGTERM: {self.log()}"
        return code

    def wait_log(self, pattern, timeout=10):
        """Waits until the log matches the regular expression; returns the match."""
        deadline = time.monotonic() + timeout
        while True:
            m = re.search(pattern, self.log(), re.M)
            if m or time.monotonic() > deadline:
                assert m, f"no {pattern!r} in larchd's log after {timeout}s: {self.log()[-2000:]}"
                return m
            time.sleep(0.02)

    def log(self):
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def trainers_in(job_dir):
    """The pids of the larch-train processes working in job_dir (their cwd:
    a job's ranks run there, on this host or in a dev cluster node's
    namespace)."""
    want = os.path.realpath(job_dir)
    pids = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            exe, cwd = os.readlink(f"/proc/{d}/exe"), os.readlink(f"/proc/{d}/cwd")
        except OSError:
            continue
        if exe.endswith("/larch-train") and cwd == want:
            pids.append(int(d))
    return pids


def pause_trainers(job_dir):
    """SIGSTOP to a job's trainers, so that it is still running when a test
    has done what it must do to it, however fast the machine; the pids."""
    pids = trainers_in(job_dir)
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    return pids


def stand_in_trainer(path, body):
    """Writes a stand-in for larch-train at path: a shell script that runs
    body as the job, and hands the probes larchd runs at each submit
    (larch-train --probe) to the real larch-train. Returns path."""
    real = BUILD / "trainer" / "larch-train"
    path.write_text(f'#!/bin/sh\ncase "$1" in --probe) exec {real} "$@";; esac\n{body}')
    path.chmod(0o755)
    return path


@pytest.fixture
def larchd(tmp_path):
    """A started larchd (default settings, port 0, temp state dir); stopped
    with SIGTERM after the test, which must exit 0."""
    server = Larchd(tmp_path).start()
    yield server
    if server.running():
        server.stop()
