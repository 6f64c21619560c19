"""Many users on one larchd, tried as a hostile user would (issue: jobs run
as their owner).

Run as root, larchd runs every job as its owner's Unix user (run_as owner):
real Unix users (unix_users.py makes alice, bob and carol), real files only
one of them may read, a real larchd and real larch-train jobs. Each test
checks that what one user submits never reads another's data, never leaks a
server file's bytes (in the answer, the job's reason, its events or its
logs), and never takes the service down: data paths naming a FIFO, a pty,
/proc/self/environ or a link to /etc/shadow, a probe stuck as on a hung
filesystem, a full disk. service mode (larchd's own user runs the jobs)
confines user-role paths to data_roots.
"""
import concurrent.futures
import json
import os
import pathlib
import pty
import re
import signal
import subprocess
import time

import pytest
import requests

import unix_users
from larchd import BUILD, Larchd

JSON = {"Content-Type": "application/json"}
SECRET = b"LARCH-SECRET-7f3a9c-do-not-leak\n" * 64
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}

pytestmark = pytest.mark.skipif(os.geteuid() != 0,
                                reason="jobs run as their owners only where larchd is root")


def tiny_spec(name="t", steps=20, **extra):
    return {"name": name, "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "sgd", "lr": 0.1}, "steps": steps, "log_every": 5, **extra}


def text_spec(path, name="txt", steps=4):
    return {"name": name, "model": {"type": "gpt", "layers": 1, "heads": 2, "dim": 16, "seq": 16},
            "data": {"format": "text", "path": str(path), "val_fraction": 0.1},
            "batch": {"global": 4}, "optimizer": {"type": "adamw", "lr": 1e-3}, "steps": steps}


def leaked(text, secret=SECRET):
    """Whether text shows any rendering of the secret's first bytes: the text
    itself, or its first 4 or 8 bytes as a decimal or hex integer (either
    byte order), as a format string would print them."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    if secret[:12].decode() in text:
        return True
    for n in (4, 8):
        for order in ("big", "little"):
            for signed in (False, True):
                v = int.from_bytes(secret[:n], order, signed=signed)
                if str(v) in text or f"{v & (2 ** (8 * n) - 1):x}" in text.lower():
                    return True
    return False


class Server:
    """A started larchd with token headers for users (Unix users of the same
    name unless mapped)."""

    def __init__(self, tmp, args=()):
        tmp.mkdir(parents=True, exist_ok=True)
        self.tmp = tmp
        self.d = Larchd(tmp, args=list(args)).start()
        self.url = self.d.url
        self.admin = {**self.d.auth(), **JSON}
        self.users = {}

    def user(self, name, role="user", unix_user=None):
        if name not in self.users:
            cmd = [str(self.d.exe), "token", "create", "--user", name, "--role", role,
                   "--state-dir", str(self.d.state_dir)]
            if unix_user:
                cmd += ["--unix-user", unix_user]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
            assert out.returncode == 0, out.stderr
            self.users[name] = {**self.d.auth(out.stdout.strip()), **JSON}
        return self.users[name]

    def post(self, who, spec, timeout=30):
        return requests.post(self.url + "/v1/jobs", headers=who, json=spec, timeout=timeout)

    def submit(self, who, spec):
        r = self.post(who, spec)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def get(self, path, who=None):
        r = requests.get(self.url + path, headers=who or self.admin, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def wait(self, job_id, states=FINAL, timeout=60):
        deadline = time.monotonic() + timeout
        while True:
            job = self.get(f"/v1/jobs/{job_id}")
            if job["state"] in states:
                return job
            assert time.monotonic() < deadline, f"{job_id} still {job['state']} after {timeout}s"
            time.sleep(0.05)

    def job_dir(self, job_id):
        return self.d.state_dir / "jobs" / job_id

    def all_text_of(self, job_id):
        """The job's JSON, events and logs, as a client sees them."""
        parts = [json.dumps(self.get(f"/v1/jobs/{job_id}")),
                 json.dumps(self.get(f"/v1/jobs/{job_id}/events"))]
        for stream in ("stdout", "stderr"):
            parts.append(json.dumps(self.get(f"/v1/jobs/{job_id}/logs?stream={stream}")))
        return "\n".join(parts)

    def stop(self):
        self.d.stop()


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("tenancy"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def secret_of_bob(tmp_path_factory):
    """A file only bob may read, in a directory everyone may enter."""
    unix_users.ensure()
    d = tmp_path_factory.mktemp("bob-files")
    unix_users.make_reachable(d)
    os.chmod(d, 0o755)
    path = d / "secret.bin"
    path.write_bytes(SECRET)
    os.chown(path, unix_users.uid("bob"), -1)
    os.chmod(path, 0o600)
    return path


def owner_of(path):
    import pwd
    return pwd.getpwuid(os.lstat(path).st_uid).pw_name


def test_jobs_run_as_their_owner(srv):
    alice = srv.user("alice")
    job_id = srv.submit(alice, tiny_spec("mine", checkpoint_every=10))
    job = srv.wait(job_id)
    assert job["state"] == "COMPLETED", job
    assert job["run_as"] == "alice" and job["owner"] == "alice"
    d = srv.job_dir(job_id)
    st = os.stat(d)
    assert owner_of(d) == "alice" and st.st_mode & 0o777 == 0o750
    for name in ("spec.json", "stdout.log", "metrics.jsonl", "result.json", "launch"):
        assert owner_of(d / name) == "alice", name
    # larchd still reads what the job wrote
    points = srv.get(f"/v1/jobs/{job_id}/metrics?name=train/loss", alice)
    assert points["series"]["train/loss"], points
    ckpts = srv.get(f"/v1/jobs/{job_id}/checkpoints", alice)["checkpoints"]
    assert ckpts and all(owner_of(srv.d.state_dir / "jobs" / job_id / "checkpoints" /
                                  f"step-{c['step']:08d}.safetensors") == "alice" for c in ckpts)
    # the state dir and the jobs dir let owners through and list nothing
    assert os.stat(srv.d.state_dir).st_mode & 0o777 == 0o711
    assert os.stat(srv.d.state_dir / "jobs").st_mode & 0o777 == 0o711
    # the first admin runs jobs as larchd's own user
    admin_job = srv.submit(srv.admin, tiny_spec("admins", steps=5))
    assert srv.wait(admin_job)["run_as"] == "root"


def test_trainer_runs_with_the_owners_ids(srv):
    """The running trainer's real, effective and saved ids are the owner's."""
    carol = srv.user("carol")
    job_id = srv.submit(carol, tiny_spec("ids", steps=100000))
    srv.wait(job_id, {"RUNNING"})
    launch = srv.job_dir(job_id) / "launch"
    deadline = time.monotonic() + 10
    while not launch.exists():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pid = int(launch.read_text())
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    uids = re.search(r"^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", status, re.M).groups()
    gids = re.search(r"^Gid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)", status, re.M).groups()
    want = unix_users.uid("carol")
    assert set(map(int, uids)) == {want}, status
    import pwd
    assert set(map(int, gids)) == {pwd.getpwnam("carol").pw_gid}
    environ = pathlib.Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    assert b"USER=carol" in environ and b"LOGNAME=carol" in environ
    r = requests.post(f"{srv.url}/v1/jobs/{job_id}/cancel", headers=carol, timeout=10)
    assert r.status_code in (200, 202), r.text
    assert srv.wait(job_id)["state"] == "CANCELLED"


def test_user_without_unix_account_is_refused(srv):
    ghost = srv.user("ghost-no-account")
    before = srv.get("/v1/jobs")["jobs"]
    r = srv.post(ghost, tiny_spec())
    assert r.status_code == 403, r.text
    msg = r.json()["error"]["message"]
    assert "ghost-no-account" in msg and "Unix user" in msg
    assert srv.get("/v1/jobs")["jobs"] == before


def test_user_role_never_runs_as_uid_0(srv):
    mallory = srv.user("mallory", unix_user="root")
    r = srv.post(mallory, tiny_spec())
    assert r.status_code == 403, r.text
    assert "uid 0" in r.json()["error"]["message"]


def test_mapped_user_runs_as_the_mapped_account(srv):
    dana = srv.user("dana", unix_user="bob")
    job_id = srv.submit(dana, tiny_spec("mapped", steps=5))
    job = srv.wait(job_id)
    assert job["state"] == "COMPLETED" and job["run_as"] == "bob" and job["owner"] == "dana"
    assert owner_of(srv.job_dir(job_id) / "stdout.log") == "bob"


def test_file_of_another_user_is_refused_without_its_bytes(srv, secret_of_bob):
    alice = srv.user("alice")
    specs = [
        {**tiny_spec("idx"), "data": {"format": "idx", "train": {
            "images": str(secret_of_bob), "labels": str(secret_of_bob)}}},
        {**text_spec(secret_of_bob)},
        {**text_spec(secret_of_bob), "data": {"format": "tokens_u16",
                                              "train": str(secret_of_bob)}},
        tiny_spec("init", init={"from": str(secret_of_bob)}),
    ]
    for spec in specs:
        r = srv.post(alice, spec)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "invalid_spec"
        assert "ermission denied" in r.text, r.text
        assert not leaked(r.text), r.text
    # bob himself may
    bob = srv.user("bob")
    r = srv.post(bob, text_spec(secret_of_bob, steps=1))
    assert r.status_code == 201, r.text
    srv.wait(r.json()["id"])


def test_trainer_checks_again_when_it_opens(tmp_path, secret_of_bob):
    """A file readable at submit that is swapped for bob's before the job
    starts: the trainer, running as alice, cannot open it, and none of its
    bytes reach the job's reason, events or logs."""
    server = Server(tmp_path / "s", args=["--max-local-jobs", "1"])
    try:
        alice = server.user("alice")
        data = tmp_path / "data"
        data.mkdir()
        unix_users.make_reachable(data)
        os.chmod(data, 0o755)
        corpus = data / "corpus.txt"
        corpus.write_text("a readable corpus of bytes " * 50)
        os.chmod(corpus, 0o644)
        link = data / "link.txt"
        link.symlink_to(corpus)
        blocker = server.submit(server.admin, tiny_spec("blocker", steps=100000))
        server.wait(blocker, {"RUNNING"})
        job_id = server.submit(alice, text_spec(link, name="swapped"))
        assert server.get(f"/v1/jobs/{job_id}")["state"] in ("PENDING", "QUEUED")
        link.unlink()
        link.symlink_to(secret_of_bob)
        requests.post(f"{server.url}/v1/jobs/{blocker}/cancel", headers=server.admin, timeout=10)
        job = server.wait(job_id)
        assert job["state"] == "FAILED", job
        assert "ermission denied" in job["reason"], job
        assert not leaked(server.all_text_of(job_id))
    finally:
        server.stop()


def test_checkpoints_of_another_user(srv):
    bob, alice = srv.user("bob"), srv.user("alice")
    bobs = srv.submit(bob, tiny_spec("bobs", steps=10))
    assert srv.wait(bobs)["state"] == "COMPLETED"
    # users see how to start from a checkpoint, not where larchd keeps it
    mine = srv.get(f"/v1/jobs/{bobs}/checkpoints", bob)["checkpoints"]
    assert mine and "path" not in mine[-1]
    assert mine[-1]["init"] == {"job": bobs, "step": mine[-1]["step"]}
    path = srv.get(f"/v1/jobs/{bobs}/checkpoints")["checkpoints"][-1]["path"]
    # alice can start from it neither by job nor by its path
    r = srv.post(alice, tiny_spec("steal", init={"job": bobs}))
    assert r.status_code == 400 and r.json()["error"]["detail"]["field"] == "init.job", r.text
    r = srv.post(alice, tiny_spec("steal", init={"from": path}))
    assert r.status_code == 400 and "ermission denied" in r.text, r.text
    # bob can, by job and step, and admins by job
    again = srv.submit(bob, tiny_spec("again", steps=12, init={"job": bobs,
                                                                "step": mine[-1]["step"]}))
    assert srv.wait(again)["state"] == "COMPLETED"
    r = srv.post(bob, tiny_spec("nostep", init={"job": bobs, "step": 999}))
    assert r.status_code == 400 and r.json()["error"]["detail"]["field"] == "init.step", r.text
    assert srv.wait(srv.submit(srv.admin, tiny_spec("adm", steps=12,
                                                    init={"job": bobs})))["state"] == "COMPLETED"


def test_hostile_data_paths_leave_larchd_answering(srv, tmp_path, secret_of_bob):
    alice = srv.user("alice")
    d = tmp_path / "hostile"
    d.mkdir()
    unix_users.make_reachable(d)
    os.chmod(d, 0o755)
    fifo = d / "fifo"
    os.mkfifo(fifo)
    os.chmod(fifo, 0o666)
    shadow_link = d / "shadow"
    shadow_link.symlink_to("/etc/shadow")
    bob_link = d / "bob"
    bob_link.symlink_to(secret_of_bob)
    master, slave = pty.openpty()
    tty = os.ttyname(slave)
    paths = [fifo, tty, "/proc/self/environ", shadow_link, bob_link, "/dev/zero", d,
             "/etc/shadow", str(srv.d.state_dir / "larch.db")]
    try:
        specs = [text_spec(p, name=f"h{i}") for i, p in enumerate(paths)] * 4
        with concurrent.futures.ThreadPoolExecutor(len(specs)) as pool:
            futures = [pool.submit(srv.post, alice, s) for s in specs]
            # meanwhile larchd answers everyone else
            for _ in range(5):
                h = requests.get(srv.url + "/healthz", timeout=5)
                assert h.status_code == 200
            answers = [f.result(timeout=60) for f in futures]
        for spec, r in zip(specs, answers):
            assert r.status_code == 400, (spec["data"], r.text)
            assert not leaked(r.text), r.text
            assert "root:" not in r.text and "SQLite" not in r.text
    finally:
        os.close(master)
        os.close(slave)


def test_stuck_probe_is_cut_off_and_shutdown_completes(tmp_path):
    """A probe that never answers (as an open on a hung NFS mount would):
    the submit is taken unexamined after preflight_timeout, HTTP threads stay
    free, and SIGTERM stops larchd at once, answering parked submits 503.
    The stand-in trainer hangs on --probe for specs named "hang" (the real
    larch-train's probe cannot block on a local file) and runs the real
    trainer otherwise."""
    wrapper = tmp_path / "bin" / "larch-train"
    wrapper.parent.mkdir()
    real = BUILD / "trainer" / "larch-train"
    wrapper.write_text("#!/bin/sh\n"
                       "case \" $* \" in *' --probe '*)\n"
                       "  spec=$(cat)\n"
                       "  case \"$spec\" in *'\"name\":\"hang'*) sleep 600;; esac\n"
                       f"  printf '%s' \"$spec\" | exec {real} \"$@\";;\n"
                       "esac\n"
                       f"exec {real} \"$@\"\n")
    wrapper.chmod(0o755)
    unix_users.make_reachable(wrapper.parent)
    server = Server(tmp_path / "s", args=["--trainer-path", str(wrapper),
                                          "--preflight-timeout", "1", "--threads", "2"])
    stopped = False
    try:
        alice, bob = server.user("alice"), server.user("bob")
        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            futures = [pool.submit(server.post, alice, tiny_spec(f"hang{i}", steps=1))
                       for i in range(8)]
            h = requests.get(server.url + "/healthz", timeout=5)
            assert h.status_code == 200
            # alice's stuck probes hold 2 of the 4 workers at most: bob's is
            # checked at once, and stored before any of hers
            time.sleep(0.2)
            r = server.post(bob, tiny_spec("bobs", steps=1))
            assert r.status_code == 201, r.text
            answers = [f.result(timeout=60) for f in futures]
        assert all(r.status_code == 201 for r in answers), [r.text for r in answers]
        assert r.json()["id"] < min(a.json()["id"] for a in answers)
        # each cut off after its second
        assert re.search(r"did not answer within 1s", server.d.log())
        # parked submits when SIGTERM comes: answered 503, larchd exits 0
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            futures = [pool.submit(server.post, alice, tiny_spec(f"hang-late{i}"))
                       for i in range(6)]
            time.sleep(0.3)
            server.stop()                      # SIGTERM; fails unless it exits 0
            stopped = True
            codes = [f.result(timeout=30).status_code for f in futures]
        assert 503 in codes and set(codes) <= {201, 503}, codes
    finally:
        if not stopped:
            server.stop()


def test_service_mode_confines_user_paths_to_data_roots(tmp_path):
    root = tmp_path / "data"
    root.mkdir()
    inside = root / "corpus.txt"
    inside.write_text("bytes anyone here may train on " * 40)
    outside = tmp_path / "private.txt"
    outside.write_bytes(SECRET)
    escape = root / "escape.txt"
    escape.symlink_to(outside)
    server = Server(tmp_path / "s", args=["--run-as", "service", "--data-roots", str(root)])
    try:
        alice = server.user("alice")
        job = server.wait(server.submit(alice, text_spec(inside)))
        assert job["state"] == "COMPLETED" and job["run_as"] is None, job
        for path in (outside, escape, "/etc/passwd", server.d.state_dir / "larch.db"):
            r = server.post(alice, text_spec(path))
            assert r.status_code == 400, r.text
            assert "outside" in r.json()["error"]["message"], r.text
            assert not leaked(r.text)
        # admins are not confined
        job = server.wait(server.submit(server.admin, text_spec(outside, steps=1)))
        assert job["state"] == "COMPLETED", job
    finally:
        server.stop()


def test_relative_data_paths_resolve_against_the_job_directory(srv):
    # <state>/jobs/j-N/../../../corpus.txt is the file beside the state dir
    corpus = srv.d.state_dir.parent / "corpus.txt"
    corpus.write_text("relative paths are the job directory's " * 40)
    os.chmod(corpus, 0o644)
    job = srv.wait(srv.submit(srv.user("alice"), text_spec("../../../corpus.txt")))
    assert job["state"] == "COMPLETED", job
    r = srv.post(srv.user("alice"), text_spec("corpus.txt"))
    assert r.status_code == 400 and "job's own directory" in r.text, r.text


def test_full_disk_keeps_jobs_waiting(tmp_path):
    """Job directories on a filesystem that is full: the job stays PENDING
    (tried again, said in the log a few times, not thousands) and runs once
    there is room."""
    state = tmp_path / "s" / "state"
    jobs = state / "jobs"
    jobs.mkdir(parents=True)
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0711", "tmpfs", str(jobs)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    try:
        filler = jobs / "filler"
        subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True)
        server = Server(tmp_path / "s")
        try:
            job_id = server.submit(server.user("alice"), tiny_spec("waits", steps=5))
            time.sleep(5)
            assert server.get(f"/v1/jobs/{job_id}")["state"] == "PENDING"
            lines = re.findall(r"stays PENDING", server.d.log())
            assert 1 <= len(lines) <= 2, server.d.log()[-2000:]
            filler.unlink()
            assert server.wait(job_id)["state"] == "COMPLETED"
        finally:
            server.stop()
    finally:
        subprocess.run(["umount", "-l", str(jobs)], capture_output=True)
