"""The Python client (clients/python, import name larch_client) against a
real larchd running real larch-train jobs.

One larchd for the module, with a user alice: a tiny job that evaluates and
checkpoints (`done`, trained once), and the tests drive everything else
through larch_client. A second larchd with a stand-in trainer that exits at
once (`fast`) gives the many jobs the page test needs. The package is
imported from the source tree; test_pip_install installs it with pip
(offline, no build isolation) into a folder and uses it from there, which is
what proves `pip install ./clients/python` works.
"""
import datetime
import hashlib
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import threading

import pytest
import requests

from larchd import Larchd, stand_in_trainer

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "clients" / "python"
sys.path.insert(0, str(PACKAGE / "src"))

import larch_client  # noqa: E402
from larch_client import (BadRequest, ChecksumMismatch, Client, ConfigError, Conflict,  # noqa: E402
                          LarchError, NotFound, Unauthorized)

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def spec(name, steps=20, **extra):
    return {"name": name, "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": steps, "log_every": 5, **extra}


def make_token(d, user):
    out = subprocess.run([str(d.exe), "token", "create", "--user", user, "--role", "user",
                          "--state-dir", str(d.state_dir)],
                         capture_output=True, text=True, timeout=10)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


class Server:
    def __init__(self, tmp, args=()):
        self.d = Larchd(tmp, args=list(args)).start()
        self.url = self.d.url
        self.alice_token = make_token(self.d, "alice")
        self.alice = Client(self.url, self.alice_token)
        self.admin = Client(self.url, self.d.admin_token)

    def stop(self):
        self.alice.close()
        self.admin.close()
        self.d.stop()
        assert not re.search(r" [A-Z]+ \S+ 5\d\d \d+us", self.d.log()), "a 5xx was logged"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    s = Server(tmp_path_factory.mktemp("pyclient"))
    # started at once, so that it trains while the first tests run
    s.done_id = s.alice.submit(spec("done", eval_every=10, checkpoint_every=10))["id"]
    yield s
    s.stop()


@pytest.fixture(scope="module")
def done(server):
    """The tiny job, ended (COMPLETED, else the test fails)."""
    job = server.alice.wait(server.done_id, timeout=120)
    assert job["state"] == "COMPLETED", job
    return job


@pytest.fixture(scope="module")
def fast(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("pyclient-fast")
    trainer = stand_in_trainer(tmp / "fake-train", "exit 0\n")
    s = Server(tmp, ["--trainer-path", str(trainer)])
    yield s
    s.stop()


def count_requests(client, path):
    """A list that gets each request of client to path (its requests.PreparedRequest)."""
    seen = []

    def hook(r, *args, **kwargs):
        if requests.utils.urlparse(r.request.url).path == path:
            seen.append(r.request)
    client.session.hooks["response"].append(hook)
    return seen


# ---- the package ------------------------------------------------------------------


def test_pip_install(server, tmp_path):
    # a copy, so that the build's files (build/, *.egg-info) stay out of the tree
    src = shutil.copytree(PACKAGE, tmp_path / "src")
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
                          "--no-build-isolation", "--disable-pip-version-check",
                          "--target", str(target), str(src)],
                         capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stdout + pip.stderr
    assert (target / "larch_client" / "py.typed").is_file()
    assert list(target.glob("larch_client-*.dist-info"))
    code = ("import larch_client, sys; c = larch_client.Client(); "
            "assert larch_client.__file__.startswith(sys.argv[1]), larch_client.__file__; "
            "print(c.whoami()['user'])")
    env = {**os.environ, "PYTHONPATH": str(target), "LARCH_URL": server.url,
           "LARCH_TOKEN": server.alice_token, "HOME": str(tmp_path)}
    run = subprocess.run([sys.executable, "-c", code, str(target)], capture_output=True,
                         text=True, timeout=60, env=env, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "alice"


# ---- settings -----------------------------------------------------------------------


def test_settings_from_environment(server, monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.setenv("LARCH_URL", server.url + "/")
    monkeypatch.setenv("LARCH_TOKEN", server.alice_token)
    monkeypatch.setenv("LARCH_CA", str(tmp_path / "ca.pem"))
    c = Client()
    assert c.url == server.url
    assert c.session.verify == str(tmp_path / "ca.pem")
    assert c.whoami() == {"user": "alice", "role": "user"}
    # arguments win over the environment
    assert Client(ca="/x/ca.pem").session.verify == "/x/ca.pem"
    assert Client(server.url, server.d.admin_token).whoami()["role"] == "admin"
    monkeypatch.delenv("LARCH_CA")
    assert Client().session.verify is True


def test_settings_from_config_file(server, monkeypatch, tmp_path):
    for name in ("LARCH_URL", "LARCH_TOKEN", "LARCH_CA"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    config = tmp_path / "larch" / "config"
    config.parent.mkdir()
    config.write_text(f"# larch\nurl = {server.url}\n\ntoken = {server.alice_token}\n")
    config.chmod(0o600)
    assert Client().whoami()["user"] == "alice"
    # the environment wins over the file
    monkeypatch.setenv("LARCH_TOKEN", server.d.admin_token)
    assert Client().whoami()["user"] != "alice"
    monkeypatch.delenv("LARCH_TOKEN")
    # a file others may read holds a token in the open: refused, as the CLI does
    config.chmod(0o644)
    with pytest.raises(ConfigError, match="too open"):
        Client()
    config.chmod(0o600)
    config.write_text("url\n")
    with pytest.raises(ConfigError, match=r"config:1: expected"):
        Client()


def test_unknown_token_is_unauthorized(server):
    with pytest.raises(Unauthorized) as e:
        Client(server.url, "lt_" + "0" * 64).whoami()
    assert (e.value.status, e.value.code) == (401, "unauthorized")


# ---- jobs ---------------------------------------------------------------------------


def test_submit_and_get(server):
    c = server.alice
    job = c.submit(spec("idem", steps=1), labels={"project": "pyclient"}, idempotency_key="k-1")
    assert re.fullmatch(r"j-\d{6,}", job["id"]) and job["owner"] == "alice"
    again = c.submit(spec("idem", steps=1), labels={"project": "pyclient"},
                     idempotency_key="k-1")
    assert again["id"] == job["id"]
    with pytest.raises(Conflict) as e:
        c.submit(spec("other", steps=1), idempotency_key="k-1")
    assert e.value.status == 409
    got = c.get(job["id"])
    assert got["id"] == job["id"] and got["name"] == "idem"
    assert got["labels"] == {"project": "pyclient"}
    assert c.set_labels(job["id"], {"project": "p2"})["labels"] == {"project": "p2"}
    assert c.wait(job["id"], timeout=120)["state"] == "COMPLETED"
    events = c.events(job["id"])
    assert events[0]["to"] == "PENDING" and events[-1]["to"] == "COMPLETED"


def test_errors_carry_code_and_detail(server):
    c = server.alice
    with pytest.raises(NotFound) as e:
        c.get("j-999999")
    assert (e.value.status, e.value.code) == (404, "not_found")
    assert "j-999999" in e.value.message
    bad = spec("bad")
    bad["batch"]["global"] = 0
    with pytest.raises(BadRequest) as e:
        c.submit(bad)
    assert (e.value.status, e.value.code) == (400, "invalid_spec")
    assert e.value.detail["field"] == "batch.global"
    assert "batch.global" in str(e.value)
    with pytest.raises(BadRequest) as e:
        list(c.list(page_size=501))
    assert e.value.detail["parameter"] == "limit"
    assert isinstance(e.value, LarchError)


def test_watch_until_completed(server):
    c = server.alice
    job = c.submit(spec("watched", steps=10))
    changes = list(c.watch(job["id"], timeout=120))
    states = [ch["state"] for ch in changes]
    assert states[-1] == "COMPLETED", states
    assert len(set(states)) == len(states), states
    # after the first (the state at the start), each is a change from /v1/events
    assert all(ch["job"] == job["id"] and ch["seq"] for ch in changes[1:])
    seqs = [ch["seq"] for ch in changes[1:]]
    assert seqs == sorted(seqs)
    order = ["PENDING", "QUEUED", "RUNNING", "COMPLETED"]
    assert [order.index(s) for s in states] == sorted(order.index(s) for s in states)
    # a job that has ended: its state, and the generator ends
    assert [ch["state"] for ch in c.watch(job["id"])] == ["COMPLETED"]


def test_watch_times_out(server):
    c = server.alice
    job = c.submit(spec("slow", steps=100000))
    try:
        with pytest.raises(TimeoutError):
            for _ in c.watch(job["id"], timeout=1):
                pass
    finally:
        c.cancel(job["id"])


def test_cancel(server):
    c = server.alice
    job = c.submit(spec("long", steps=100000))
    cancelled = c.cancel(job["id"])
    assert cancelled["id"] == job["id"]
    assert c.wait(job["id"], timeout=60)["state"] == "CANCELLED"
    with pytest.raises(Conflict) as e:
        c.cancel(job["id"])
    assert (e.value.status, e.value.code) == (409, "conflict")


def test_logs_follow(server):
    c = server.alice
    job = c.submit(spec("talky", steps=40))
    lines = []
    # follow from the submit to the end, in a thread so that a hang fails
    t = threading.Thread(target=lambda: lines.extend(c.logs(job["id"], follow=True, poll=0.2)))
    t.start()
    t.join(120)
    assert not t.is_alive(), "logs(follow=True) did not end with the job"
    assert c.get(job["id"])["state"] == "COMPLETED"
    whole = c.logs(job["id"])
    assert isinstance(whole, str) and whole
    assert "\n".join(lines) == whole.rstrip("\n")
    assert any("40" in line for line in lines)
    assert isinstance(c.logs(job["id"], stream="stderr"), str)


def test_list_pages(fast):
    c = fast.alice
    ids = [c.submit(spec(f"p{i}", steps=1), labels={"batch": "pages"})["id"] for i in range(7)]
    c.submit(spec("elsewhere", steps=1), labels={"batch": "other"})
    pages = count_requests(c, "/v1/jobs")
    got = [j["id"] for j in c.list(label="batch:pages", page_size=3)]
    assert got == ids[::-1]                        # newest first, each once
    assert len(pages) == 3 and "cursor=" in pages[-1].url
    assert [j["id"] for j in c.list(label=("batch", "pages"), page_size=500)] == ids[::-1]
    assert [j["id"] for j in c.list(label={"batch": "other"})] != []
    for i in ids:
        c.wait(i, timeout=60)
    assert {j["id"] for j in c.list(state="COMPLETED", label="batch:pages")} == set(ids)
    assert list(c.list(state="RUNNING", label="batch:pages")) == []
    assert list(c.list(name="p3")) == [c.get(ids[3])]


def test_metrics_and_compare(server, done):
    c = server.alice
    m = c.metrics(done["id"], "val/accuracy")
    assert m["reported"] is True and m["state"] == "COMPLETED"
    assert set(m["series"]) == {"val/accuracy"}
    points = m["series"]["val/accuracy"]
    assert [p[0] for p in points] == [10, 20] and all(0 <= p[1] <= 1 for p in points)
    both = c.metrics(done["id"], ["train/loss", "val/accuracy"], max_points=2)
    assert set(both["series"]) == {"train/loss", "val/accuracy"}
    assert len(both["series"]["train/loss"]) <= 2
    assert "train/loss" in c.metrics(done["id"])["series"]
    cmp = c.compare([done["id"], "j-999999"], "val/accuracy", x="examples")
    assert cmp["name"] == "val/accuracy" and cmp["x"] == "examples"
    assert cmp["jobs"][0]["points"][0][:2] == [10 * 256, points[0][1]]
    assert cmp["jobs"][1]["error"]["code"] == "not_found"
    with pytest.raises(BadRequest) as e:
        c.compare([done["id"]], "val/accuracy", x="nope")
    assert e.value.detail["parameter"] == "x"


def test_checkpoint_download_and_resume(server, done, tmp_path, monkeypatch):
    c = server.alice
    listed = c.checkpoints(done["id"])
    assert [ck["step"] for ck in listed] == [10, 20]
    newest = listed[-1]
    out = c.download_checkpoint(done["id"], path=tmp_path / "m.safetensors")
    data = out.read_bytes()
    assert len(data) == newest["bytes"]
    assert hashlib.sha256(data).hexdigest() == newest["sha256"]
    assert not (tmp_path / "m.safetensors.part").exists()

    # a .part holding the first half: only the rest is asked for
    gets = count_requests(c, f"/v1/jobs/{done['id']}/checkpoints/20")
    part = tmp_path / "r.safetensors.part"
    half = len(data) // 2
    part.write_bytes(data[:half])
    got = c.download_checkpoint(done["id"], step=20, path=tmp_path / "r.safetensors")
    assert got.read_bytes() == data and not part.exists()
    assert [g.headers.get("Range") for g in gets] == [f"bytes={half}-"]

    # the default name, and an older step
    monkeypatch.chdir(tmp_path)
    first = c.download_checkpoint(done["id"], step=10)
    assert first.name == f"{done['id']}-step-00000010.safetensors"
    assert hashlib.sha256(first.read_bytes()).hexdigest() == listed[0]["sha256"]

    # a .part of other bytes: the whole is not the recorded file; .part is kept
    bad = tmp_path / "b.safetensors"
    pathlib.Path(str(bad) + ".part").write_bytes(b"x" * half)
    with pytest.raises(ChecksumMismatch) as e:
        c.download_checkpoint(done["id"], path=bad)
    assert newest["sha256"] in e.value.message
    assert not bad.exists() and pathlib.Path(str(bad) + ".part").stat().st_size == len(data)

    with pytest.raises(LarchError, match="no checkpoint of step 7"):
        c.download_checkpoint(done["id"], step=7, path=tmp_path / "x")
    with pytest.raises(NotFound):
        c.checkpoints("j-999999")


# ---- sweeps, usage, webhooks -------------------------------------------------------


def test_sweep(server):
    c = server.alice
    sweep = c.submit_sweep({"name": "lr", "base": spec("ignored", steps=5),
                            "axes": {"optimizer.lr": [0.05, 0.1]},
                            "labels": {"project": "pysweep"}})
    sid = sweep["id"]
    assert re.fullmatch(r"s-\d{6,}", sid) and sweep["children_count"] == 2
    assert sid in [s["id"] for s in c.list_sweeps(page_size=1)]
    children = list(c.list(sweep=sid))
    assert sorted(j["params"]["optimizer.lr"] for j in children) == [0.05, 0.1]
    for j in children:
        assert c.wait(j["id"], timeout=120)["state"] == "COMPLETED"
    got = c.get_sweep(sid)
    assert got["state"] == "COMPLETED" and len(got["children"]) == 2
    with pytest.raises(BadRequest) as e:
        c.submit_sweep({"name": "bad", "base": spec("x"), "axes": {"optimizer.lr": []}})
    assert e.value.detail["field"].startswith("axes")

    long = c.submit_sweep({"name": "long", "base": spec("x", steps=100000),
                           "axes": {"optimizer.lr": [0.05, 0.1]}, "max_parallel": 1})
    c.cancel_sweep(long["id"])
    for child in c.get_sweep(long["id"])["children"]:
        assert c.wait(child["job"], timeout=60)["state"] == "CANCELLED"
    assert c.get_sweep(long["id"])["state"] == "CANCELLED"
    with pytest.raises(NotFound):
        c.get_sweep("s-999999")


def test_usage(server, done):
    since = (datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=2)).date()
    u = server.alice.usage(from_=since.isoformat(), group_by=["user", "executor"])
    assert u["from"].startswith(since.isoformat())
    assert u["group_by"] == ["user", "executor"]
    rows = [r for r in u["usage"] if r["user"] == "alice"]
    assert rows and rows[0]["executor"] == "local" and rows[0]["jobs"] >= 1
    with pytest.raises(BadRequest) as e:
        server.alice.usage(group_by="planet")
    assert e.value.detail["parameter"] == "group_by"


def test_webhooks(server):
    c = server.alice
    hook = c.create_webhook("http://127.0.0.1:9/larch", ["job.completed"], "s" * 16)
    assert re.fullmatch(r"wh-\d{6,}", hook["id"]) and "secret" not in hook
    assert hook["id"] in [h["id"] for h in c.list_webhooks()]
    assert c.get_webhook(hook["id"])["events"] == ["job.completed"]
    assert c.webhook_deliveries(hook["id"], limit=5) == []
    c.delete_webhook(hook["id"])
    with pytest.raises(NotFound):
        c.get_webhook(hook["id"])
    with pytest.raises(BadRequest) as e:
        c.create_webhook("http://127.0.0.1:9/larch", ["job.exploded"], "s" * 16)
    assert e.value.detail["field"] == "events"


def test_exports():
    assert set(larch_client.__all__) <= set(dir(larch_client))
    assert issubclass(NotFound, LarchError) and issubclass(ChecksumMismatch, LarchError)


def test_readme_example(server, tmp_path, monkeypatch, capsys):
    """clients/python/README.md's end-to-end example runs as written, on
    fmnist-quick cut to 20 steps."""
    readme = (PACKAGE / "README.md").read_text()
    code = re.search(r"## End to end\n\n```python\n(.*?)```", readme, re.S).group(1)
    quick = json.loads((ROOT / "trainer" / "examples" / "fmnist-quick.json").read_text())
    quick.update(steps=20, eval_every=10, checkpoint_every=10)
    quick["schedule"]["warmup"]["steps"] = 5
    (tmp_path / "trainer" / "examples").mkdir(parents=True)
    (tmp_path / "trainer" / "examples" / "fmnist-quick.json").write_text(json.dumps(quick))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("LARCH_URL", server.url)
    monkeypatch.setenv("LARCH_TOKEN", server.alice_token)
    exec(compile(code, "README.md", "exec"), {})
    out = capsys.readouterr().out.splitlines()
    assert out[-3] == "COMPLETED"
    assert re.fullmatch(r"val/accuracy 0\.\d{4} at step 20", out[-2])
    saved = out[-1].split()[-1]
    assert re.fullmatch(r"j-\d{6,}-step-00000020\.safetensors", saved)
    assert (tmp_path / saved).stat().st_size > 0
