"""larch-train's reporter (trainer/reporter.c): metrics and the result posted to
larchd while it trains (docs/api.md, "What larch-train sends"), against a real
HTTP server in the test that records every request."""
import collections
import http.server
import json
import os
import signal
import socket
import subprocess
import threading
import time

import pytest

from datasets import write_image_set
from jobdir import metrics, result
from larchd import StubServer, send_json

JOB_ID, TOKEN = "j-000042", "job-token-7f3a"
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 3
STEPS = 400                     # about 1300 points: more than one batch
REPORT_ENV = ("LARCH_SERVER_URL", "LARCH_JOB_ID", "LARCH_JOB_TOKEN", "LARCH_REPORT_FLUSH_S")


class Larchd(StubServer):
    """Stands in for larchd's two trainer endpoints. answer(n, path) gives the
    status for the n-th request (from 0) and may sleep first."""

    def __init__(self, answer=None):
        self.requests = []
        self.lock = threading.Lock()
        answer = answer or (lambda n, path: 200)
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"          # keep-alive, as libcurl uses it

            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                req = {"path": self.path, "headers": dict(self.headers), "body": body}
                with outer.lock:
                    n = len(outer.requests)
                    outer.requests.append(req)
                req["status"] = status = answer(n, self.path)
                reply = json.dumps({"accepted": len(body.get("metrics", []))}).encode()
                send_json(self, status, reply)

        self.serve(Handler)

    def metric_posts(self, status=None):
        return [r for r in self.requests if r["path"].endswith("/metrics")
                and (status is None or r["status"] == status)]

    def accepted_points(self):
        return [p for r in self.metric_posts(200) for p in r["body"]["metrics"]]


@pytest.fixture
def larchd():
    servers = []

    def start(answer=None):
        servers.append(Larchd(answer))
        return servers[-1]
    yield start
    for s in servers:
        s.close()


@pytest.fixture
def spec(tmp_path):
    data = write_image_set(tmp_path, n_train=128, n_val=32, side=8)
    return {"name": "report", "model": {"type": "mlp", "hidden": [32]}, "data": data,
            "batch": {"global": 32}, "optimizer": {"type": "sgd", "lr": 0.05}, "steps": STEPS}


def report_env(url, **extra):
    env = {k: v for k, v in os.environ.items() if k not in REPORT_ENV}
    if url is not None:
        env.update(LARCH_SERVER_URL=url, LARCH_JOB_ID=JOB_ID, LARCH_JOB_TOKEN=TOKEN)
    env.update(extra)
    return env


def command(trainer, spec, job):
    return [str(trainer.exe), "--spec", str(trainer.write_spec(spec)), "--job-dir", str(job),
            "--threads", "2", "--quiet"]


def run(trainer, spec, job, env):
    return subprocess.run(command(trainer, spec, job), env=env, capture_output=True, text=True,
                          timeout=300)


def keys(points):
    return [(p["step"], p["name"]) for p in points]


def assert_once_each(points, job):
    """points hold every line of job's metrics.jsonl exactly once, and nothing else."""
    got, want = collections.Counter(keys(points)), collections.Counter(keys(metrics(job)))
    assert max(got.values()) == 1, [k for k, n in got.items() if n > 1][:5]
    assert got == want


def test_metrics_and_result_arrive_once_each(trainer, spec, larchd, tmp_path):
    server = larchd()
    job = tmp_path / "job"
    out = run(trainer, spec, job, report_env(server.url))
    assert out.returncode == EXIT_OK, out.stderr
    assert f"report: posting metrics to {server.url}/v1/jobs/{JOB_ID}" in out.stdout

    posts = server.metric_posts()
    assert len(posts) >= 2 and all(1 <= len(r["body"]["metrics"]) <= 1000 for r in posts)
    assert_once_each(server.accepted_points(), job)
    # the points are the lines of metrics.jsonl, values and times included
    lines = sorted(metrics(job), key=lambda p: (p["step"], p["name"]))
    assert sorted(server.accepted_points(), key=lambda p: (p["step"], p["name"])) == lines

    for r in server.requests:
        assert r["headers"]["Authorization"] == f"Bearer {TOKEN}"
        assert r["headers"]["Content-Type"] == "application/json"
    assert {r["path"] for r in posts} == {f"/v1/jobs/{JOB_ID}/metrics"}
    last = server.requests[-1]
    assert last["path"] == f"/v1/jobs/{JOB_ID}/result"
    assert len(server.requests) == len(posts) + 1
    assert last["body"] == result(job)
    assert last["body"]["status"] == "completed" and last["body"]["steps"] == STEPS


def test_a_failed_run_posts_its_result_too(trainer, spec, larchd, tmp_path):
    server = larchd()
    job = tmp_path / "job"
    spec["data"]["train"]["images"] = str(tmp_path / "missing-images.idx")
    out = run(trainer, spec, job, report_env(server.url))
    assert out.returncode == EXIT_FAILED
    assert [r["path"] for r in server.requests] == [f"/v1/jobs/{JOB_ID}/result"]
    posted = server.requests[0]["body"]
    assert posted == result(job)
    assert posted["status"] == "failed" and "missing-images.idx" in posted["reason"]


def test_an_interrupted_run_flushes_and_posts_its_result(trainer, spec, larchd, tmp_path):
    server = larchd()
    job = tmp_path / "job"
    spec["steps"] = 10 ** 6                        # minutes: it only ends by the signal
    cmd = [c for c in command(trainer, spec, job) if c != "--quiet"]
    proc = subprocess.Popen(cmd, env=report_env(server.url), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("step ") and int(line.split()[1].split("/")[0]) >= 500:
            proc.send_signal(signal.SIGTERM)
            break
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    assert_once_each(server.accepted_points(), job)
    assert server.requests[-1]["path"] == f"/v1/jobs/{JOB_ID}/result"
    assert server.requests[-1]["body"] == result(job)
    assert result(job)["status"] == "interrupted"


def test_503s_are_retried_until_everything_arrives(trainer, spec, larchd, tmp_path):
    server = larchd(lambda n, path: 503 if n < 3 else 200)
    job = tmp_path / "job"
    # a trailing slash on the URL is not doubled in the path
    out = run(trainer, spec, job, report_env(server.url + "/", LARCH_REPORT_FLUSH_S="60"))
    assert out.returncode == EXIT_OK, out.stderr
    assert [r["status"] for r in server.requests[:3]] == [503] * 3
    assert_once_each(server.accepted_points(), job)
    assert server.requests[-1]["path"] == f"/v1/jobs/{JOB_ID}/result"
    assert server.requests[-1]["status"] == 200
    assert server.requests[-1]["body"] == result(job)
    # one message for the outage and one for the recovery, not one per try
    assert out.stderr.count("HTTP 503") == 1, out.stderr
    assert "larchd accepts posts again after 3 failed tries" in out.stderr
    assert "not posted" not in out.stderr


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_no_server_listening_changes_nothing_but_stderr(trainer, spec, tmp_path):
    plain = tmp_path / "plain"
    out = run(trainer, spec, plain, report_env(None))
    assert out.returncode == EXIT_OK, out.stderr
    assert "report: posting" not in out.stdout and "report:" not in out.stderr

    job = tmp_path / "job"
    url = f"http://127.0.0.1:{free_port()}"
    start = time.monotonic()
    out = run(trainer, spec, job, report_env(url, LARCH_REPORT_FLUSH_S="1"))
    elapsed = time.monotonic() - start
    assert out.returncode == EXIT_OK, out.stderr
    assert sorted(keys(metrics(job))) == sorted(keys(metrics(plain)))
    assert result(job)["status"] == "completed"
    assert out.stderr.count("retrying with backoff") == 1, out.stderr
    assert "were not posted; larchd imports them from metrics.jsonl" in out.stderr
    assert "result not posted; larchd reads result.json" in out.stderr
    # not a timing test: a bound that only a hang (retrying forever) would break
    assert elapsed < 30


def test_a_slow_server_does_not_hold_training_up(trainer, spec, larchd, tmp_path):
    job = tmp_path / "job"
    held = {}

    def answer(n, path):
        if n == 0:
            # hold the first post until the run has finished training (it
            # writes result.json before the final flush): a trainer that
            # waited for its posts would never get there
            deadline = time.monotonic() + 60
            while not (job / "result.json").exists() and time.monotonic() < deadline:
                time.sleep(0.02)
            held["finished_meanwhile"] = (job / "result.json").exists()
        time.sleep(0.5)
        return 200

    server = larchd(answer)
    out = run(trainer, spec, job, report_env(server.url, LARCH_REPORT_FLUSH_S="60"))
    assert out.returncode == EXIT_OK, out.stderr
    assert held == {"finished_meanwhile": True}
    assert result(job)["steps"] == STEPS
    assert_once_each(server.accepted_points(), job)
    assert server.requests[-1]["body"] == result(job)


def test_401_is_final_logged_once_and_the_run_completes(trainer, spec, larchd, tmp_path):
    server = larchd(lambda n, path: 401)
    job = tmp_path / "job"
    out = run(trainer, spec, job, report_env(server.url))
    assert out.returncode == EXIT_OK, out.stderr
    assert len(server.requests) == 1                     # no retry, no result
    assert out.stderr.count("HTTP 401") == 1, out.stderr
    assert "posting nothing more to larchd" in out.stderr
    assert result(job)["status"] == "completed"
    assert len(metrics(job)) == len(set(keys(metrics(job)))) > 1000


@pytest.mark.parametrize("env, message", [
    ({"LARCH_SERVER_URL": "http://127.0.0.1:9"}, "(missing LARCH_JOB_ID, LARCH_JOB_TOKEN)"),
    ({"LARCH_JOB_ID": JOB_ID, "LARCH_JOB_TOKEN": TOKEN}, "(missing LARCH_SERVER_URL)"),
    ({"LARCH_SERVER_URL": "127.0.0.1:9", "LARCH_JOB_ID": JOB_ID, "LARCH_JOB_TOKEN": TOKEN},
     "LARCH_SERVER_URL: must be an http:// or https:// URL"),
    ({"LARCH_SERVER_URL": "http://127.0.0.1:9", "LARCH_JOB_ID": "../x",
      "LARCH_JOB_TOKEN": TOKEN}, "LARCH_JOB_ID: must be 1 to 128 letters"),
    ({"LARCH_SERVER_URL": "http://127.0.0.1:9", "LARCH_JOB_ID": JOB_ID,
      "LARCH_JOB_TOKEN": TOKEN, "LARCH_REPORT_FLUSH_S": "soon"},
     "LARCH_REPORT_FLUSH_S: must be a number of seconds"),
])
def test_partial_or_bad_environment_is_a_usage_error(trainer, spec, tmp_path, env, message):
    job = tmp_path / "job"
    out = run(trainer, spec, job, report_env(None, **env))
    assert out.returncode == EXIT_USAGE
    assert message in out.stderr
    assert not (job / "metrics.jsonl").exists()


def test_sigterm_during_the_final_flush_keeps_to_the_deadline(trainer, spec, tmp_path):
    # a server that takes connections into its backlog and never answers
    with socket.socket() as hole:
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)
        url = "http://127.0.0.1:%d" % hole.getsockname()[1]
        job = tmp_path / "job"
        flush_s = 2
        proc = subprocess.Popen(command(trainer, spec, job),
                                env=report_env(url, LARCH_REPORT_FLUSH_S=str(flush_s)),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            while not (job / "result.json").exists() and proc.poll() is None:
                time.sleep(0.01)
            proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            _, stderr = proc.communicate(timeout=60)
        finally:
            proc.kill()
        # the run had completed: the signal and larchd change nothing of that
        assert proc.returncode == EXIT_OK, stderr
        assert result(job)["status"] == "completed"
        # the flush deadline, the result's own try (2 s) and slack; a hang is 60 s
        assert time.monotonic() - signalled < flush_s + 2 + 5
