"""One larchd per state dir (service/state_dir.h): a second larchd on the
state dir of a running one exits 1 naming the dir, the holder's pid and URL,
and changes nothing; one killed with SIGKILL leaves its lock file behind but
not its lock, even while its job runs on; `larchd token create` and
`larchd db check` work beside the running larchd (they take no lock)."""
import os
import signal
import subprocess
import time

import requests

from larchd import Larchd, larchd, larchd_exe, stand_in_trainer  # noqa: F401  (the fixture)

SPEC = {"name": "lock", "model": {"type": "mlp", "hidden": [8]}, "data": {"name": "fashion-mnist"},
        "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 10}


def second_larchd(state_dir, *args):
    """A second larchd on state_dir, on a port of its own; its CompletedProcess."""
    return subprocess.run([str(larchd_exe()), "--listen", "127.0.0.1:0", "--state-dir",
                           str(state_dir), *args], capture_output=True, text=True, timeout=30)


def lock_file(server):
    return (server.state_dir / "larchd.lock").read_text()


def test_second_larchd_on_the_state_dir_is_refused(larchd):
    state = larchd.state_dir.resolve()
    assert lock_file(larchd) == f"{larchd.proc.pid}\n{larchd.url}\n"
    before = sorted(p.name for p in state.iterdir())
    # also with the path spelled otherwise, and another executor
    for path in (state, state.parent / "." / state.name):
        out = second_larchd(path, "--executor", "local")
        assert out.returncode == 1, out
        assert out.stdout == ""
        assert out.stderr == (f"larchd: state dir {state} is in use by larchd pid "
                              f"{larchd.proc.pid} (listening on {larchd.url}): stop it, or give "
                              f"this larchd a state dir of its own (--state-dir DIR)\n")
    # the first one serves on, its lock file as it was
    assert requests.get(larchd.url + "/healthz", timeout=10).status_code == 200
    assert lock_file(larchd) == f"{larchd.proc.pid}\n{larchd.url}\n"
    assert sorted(p.name for p in state.iterdir()) == before


def test_start_after_kill9_while_its_job_runs(tmp_path):
    sleeper = stand_in_trainer(tmp_path / "sleeper", "exec sleep 300\n")
    first = Larchd(tmp_path, args=["--trainer-path", str(sleeper)]).start()
    job_pid = None
    try:
        r = requests.post(first.url + "/v1/jobs", json=SPEC, headers=first.auth(), timeout=30)
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        launch = first.state_dir / "jobs" / job / "launch"
        deadline = time.monotonic() + 60
        while not launch.exists() or not launch.read_text().strip():
            assert time.monotonic() < deadline, f"{job} never launched: {first.log()[-2000:]}"
            time.sleep(0.05)
        job_pid = int(launch.read_text())
        first.signal(signal.SIGKILL)
        assert first.wait() == -signal.SIGKILL
        os.kill(job_pid, 0)                     # the job runs on, without larchd
        assert lock_file(first) == f"{first.proc.pid}\n{first.url}\n"   # stale

        second = Larchd(tmp_path, args=["--trainer-path", str(sleeper)],
                        state_dir=first.state_dir).start()
        try:
            assert lock_file(second) == f"{second.proc.pid}\n{second.url}\n"
            assert second_larchd(first.state_dir).returncode == 1
            r = requests.get(f"{second.url}/v1/jobs/{job}", headers=second.auth(), timeout=30)
            assert r.status_code == 200, r.text
        finally:
            second.stop()
        # stopped cleanly: the lock file is left empty, and a third starts
        assert lock_file(second) == ""
        third = Larchd(tmp_path, args=["--trainer-path", str(sleeper)],
                       state_dir=first.state_dir).start()
        third.stop()
    finally:
        if first.running():
            first.proc.kill()
            first.wait()
        if job_pid is not None:
            try:
                os.killpg(job_pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_admin_commands_work_beside_the_running_larchd(larchd):
    def admin(*args):
        return subprocess.run([str(larchd.exe), *args, "--state-dir", str(larchd.state_dir)],
                              capture_output=True, text=True, timeout=30)

    made = admin("token", "create", "--user", "bob", "--role", "user")
    assert made.returncode == 0, made.stderr
    token = made.stdout.strip()
    r = requests.get(larchd.url + "/v1/jobs", headers=larchd.auth(token), timeout=30)
    assert r.status_code == 200, r.text
    listed = admin("token", "list")
    assert listed.returncode == 0 and "bob" in listed.stdout, listed
    checked = admin("db", "check")
    assert checked.returncode == 0, checked.stderr
    # and larchd still holds its state dir
    assert lock_file(larchd) == f"{larchd.proc.pid}\n{larchd.url}\n"
