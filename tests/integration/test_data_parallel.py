"""Data parallel larch-train over MPI (Open MPI's mpirun, real processes):
N ranks with the same global batch end where one rank does (within fp32
reduction order), gradient accumulation likewise, only rank 0 writes,
a spec asking for ranks the launcher did not start is refused, SIGUSR1 to
mpirun stops every rank at the same step and the resumed run is
bit-identical to a straight one, and a rank killed with -9 ends the run
within seconds (and the job resumes from its last checkpoint)."""
import collections
import os
import shutil
import signal
import subprocess
import time

import numpy as np
import pytest

from datasets import read_safetensors
from jobdir import metrics, result

EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 3


def mpi_env():
    env = dict(os.environ)
    # root in CI containers; shared memory without ptrace (CMA) in containers
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMPI_MCA_btl_vader_single_copy_mechanism="none", OMPI_MCA_rmaps_base_oversubscribe="1")
    return env


@pytest.fixture
def mpirun():
    path = shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun is missing: run deploy/install-deps.sh (openmpi-bin)")
    return path


def spec(ranks=1, steps=20, micro=None, hidden=(64,), **extra):
    s = {"name": "dp", "model": {"type": "mlp", "hidden": list(hidden)},
         "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
         "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
         "steps": steps, "log_every": 10, "seed": 7, "parallel": {"ranks": ranks}}
    if micro:
        s["batch"]["micro"] = micro
    s.update(extra)
    return s


def run(trainer, mpirun, s, job, ranks=None, timeout=600):
    """larch-train under mpirun -n ranks (the spec's), or alone with ranks=0."""
    path = trainer.write_spec(s, name=f"{job.name}.json")
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(job), "--threads", "1"]
    n = s["parallel"]["ranks"] if ranks is None else ranks
    if n:
        cmd = [mpirun, "-n", str(n)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=mpi_env())


def params(job, step):
    tensors, meta = read_safetensors(job / "checkpoints" / f"step-{step:08d}.safetensors")
    return tensors, meta


def test_ranks_and_accumulation_match_one_rank(trainer, mpirun, tmp_path):
    runs = {"1x256": (spec(1), 0), "2x128": (spec(2), None), "4x64": (spec(4), None),
            "1x4x64": (spec(1, micro=64), 0), "2x2x64": (spec(2, micro=64), None)}
    for name, (s, ranks) in runs.items():
        out = run(trainer, mpirun, s, tmp_path / name, ranks)
        assert out.returncode == EXIT_OK, f"{name}: {out.stderr[-3000:]}"
    base, _ = params(tmp_path / "1x256", 20)
    for name in runs:
        t, meta = params(tmp_path / name, 20)
        assert meta["step"] == "20" and meta["pos"] == "5120"
        for k, v in base.items():
            scale = float(np.abs(v).max()) or 1.0
            assert np.abs(t[k] - v).max() <= 2e-5 * scale, (name, k, float(np.abs(t[k] - v).max()))


def test_only_rank0_writes_and_prints(trainer, mpirun, tmp_path):
    job = tmp_path / "job"
    out = run(trainer, mpirun, spec(2, steps=20), job)
    assert out.returncode == EXIT_OK, out.stderr
    assert out.stdout.count("step 20/20") == 1 and out.stdout.count("larch-train: dp:") == 1
    assert "parallel: 2 ranks over mpi" in out.stdout
    seen = collections.Counter((m["step"], m["name"]) for m in metrics(job))
    assert seen and max(seen.values()) == 1
    assert result(job)["status"] == "completed"


def test_ranks_the_launcher_did_not_start_are_refused(trainer, mpirun, tmp_path):
    alone = run(trainer, mpirun, spec(2), tmp_path / "alone", ranks=0)
    assert alone.returncode == EXIT_USAGE
    assert "parallel.ranks" in alone.stderr and "mpirun -n 2" in alone.stderr, alone.stderr
    fewer = run(trainer, mpirun, spec(2), tmp_path / "fewer", ranks=1)
    assert fewer.returncode == EXIT_USAGE
    assert "started 1 processes" in fewer.stderr, fewer.stderr


@pytest.fixture
def started():
    """mpirun runs started by a test: their whole session is killed at the
    end, so that no rank outlives a failed test."""
    procs = []
    yield procs
    for p in procs:
        if p.poll() is None:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()


def start(trainer, mpirun, s, job, started):
    path = trainer.write_spec(s, name=f"{job.name}.json")
    proc = subprocess.Popen([mpirun, "-n", str(s["parallel"]["ranks"]), str(trainer.exe), "--spec",
                             str(path), "--job-dir", str(job), "--threads", "1"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=mpi_env(),
                            start_new_session=True)
    started.append(proc)
    return proc


def wait_step(proc, at_least):
    for line in proc.stdout:
        if line.startswith("step ") and int(line.split()[1].split("/")[0]) >= at_least:
            return
    raise AssertionError("the run ended before step %d: %s" % (at_least, proc.stderr.read()))


def test_signal_stops_all_ranks_and_resume_is_bit_exact(trainer, mpirun, tmp_path, started):
    """SIGUSR1 (Slurm's warning; mpirun forwards it, and exits with the ranks'
    status 3): every rank stops at the same step, rank 0 checkpoints."""
    s = spec(2, steps=600, hidden=(256,), log_every=10, checkpoint_every=200)
    straight = tmp_path / "straight"
    out = run(trainer, mpirun, s, straight)
    assert out.returncode == EXIT_OK, out.stderr

    resumed = tmp_path / "resumed"
    proc = start(trainer, mpirun, s, resumed, started)
    wait_step(proc, 100)
    proc.send_signal(signal.SIGUSR1)
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == EXIT_INTERRUPTED, stderr
    first = result(resumed)
    assert first["status"] == "interrupted" and 0 < first["steps"] < 600
    out = run(trainer, mpirun, s, resumed)
    assert out.returncode == EXIT_OK, out.stderr
    assert f"(step {first['steps']})" in out.stdout
    a, ma = params(straight, 600)
    b, mb = params(resumed, 600)
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), f"{k} differs after resume"
    assert ma["spec_hash"] == mb["spec_hash"]
    seen = collections.Counter((m["step"], m["name"]) for m in metrics(resumed))
    assert max(seen.values()) == 1


def test_a_rank_killed_ends_the_run_then_it_resumes(trainer, mpirun, tmp_path, started):
    s = spec(2, steps=4000, hidden=(256,), log_every=10, checkpoint_every=100)
    job = tmp_path / "job"
    proc = start(trainer, mpirun, s, job, started)
    wait_step(proc, 150)
    ranks = [int(p) for p in os.listdir("/proc") if p.isdigit() and
             _ppid(int(p)) == proc.pid and "larch-train" in _comm(int(p))]
    assert len(ranks) == 2, ranks
    os.kill(ranks[1], signal.SIGKILL)
    t0 = time.monotonic()
    proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert time.monotonic() - t0 < 30, "the other rank must not wait forever"
    ckpts = sorted((job / "checkpoints").glob("step-*.safetensors"))
    assert ckpts, "a checkpoint from before the kill"
    s2 = dict(s, steps=4000)
    out = run(trainer, mpirun, s2, job, timeout=900)
    assert out.returncode == EXIT_OK, out.stderr[-3000:]
    assert "resume: from" in out.stdout
    assert result(job)["status"] == "completed"


def _ppid(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


def _comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read()
    except OSError:
        return ""


def test_larchd_local_executor_runs_ranks_with_mpirun(tmp_path):
    """End to end: a spec with parallel.ranks 2 submitted to larchd runs as two
    processes under mpirun (the local executor) and completes with one metric
    series."""
    import requests
    from larchd import Larchd

    server = Larchd(tmp_path, env=mpi_env()).start()
    try:
        s = spec(2, steps=40)
        r = requests.post(server.url + "/v1/jobs", json=s, headers=server.auth(), timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        deadline = time.monotonic() + 120
        while True:
            j = requests.get(f"{server.url}/v1/jobs/{jid}", headers=server.auth(), timeout=30).json()
            if j["state"] in ("COMPLETED", "FAILED", "CANCELLED"):
                break
            assert time.monotonic() < deadline, j
            time.sleep(0.2)
        job = server.state_dir / "jobs" / jid
        assert j["state"] == "COMPLETED", (j, (job / "stderr.log").read_text()[-2000:])
        out = (job / "stdout.log").read_text()
        assert "parallel: 2 ranks over mpi" in out and out.count("step 40/40") == 1
        r = requests.get(f"{server.url}/v1/jobs/{jid}/metrics?name=train/loss",
                         headers=server.auth(), timeout=30)
        steps = [p[0] for p in r.json()["series"]["train/loss"]]
        assert steps == sorted(set(steps)) and steps[-1] == 40
    finally:
        server.stop()
