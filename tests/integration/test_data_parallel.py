"""Data parallel larch-train over MPI (Open MPI's mpirun, real processes):
N ranks with the same global batch end where one rank does (within fp32
reduction order), gradient accumulation likewise, ZeRO-1 likewise for every
optimizer (LARS and LAMB trust ratios from whole-tensor norms although the
shards cut tensors), fp16's loss scaler skips and halves on overflow and
grows after clean steps, only rank 0 writes,
a spec asking for ranks the launcher did not start is refused, SIGUSR1 to
mpirun stops every rank at the same step and the resumed run is
bit-identical to a straight one, and a rank killed with -9 ends the run
within seconds (and the job resumes from its last checkpoint)."""
import collections
import os
import signal
import subprocess
import time

import numpy as np
import pytest

from datasets import read_safetensors
from jobdir import metrics, result
from mpi import mpi_env

EXIT_OK, EXIT_USAGE, EXIT_INTERRUPTED = 0, 2, 3


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


OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 5e-4},
    "adamw": {"type": "adamw", "lr": 0.002, "weight_decay": 0.01},
    "lars": {"type": "lars", "lr": 2.0, "momentum": 0.9, "weight_decay": 5e-4,
             "trust_coef": 0.001, "exclude_from_adaptation": [], "exclude_from_weight_decay": []},
    "lamb": {"type": "lamb", "lr": 0.005, "weight_decay": 0.01, "exclude_from_adaptation": []},
}


def assert_close(base, other, name, rel=2e-5):
    assert base.keys() == other.keys(), name
    for k, v in base.items():
        scale = float(np.abs(v).max()) or 1.0
        diff = float(np.abs(other[k] - v).max())
        assert diff <= rel * scale, (name, k, diff, scale)


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_zero1_matches_plain_data_parallel(trainer, mpirun, tmp_path, opt):
    """Parameters and optimizer state after 20 steps: ZeRO-1 over 2 and 3
    ranks (whose ranges cut fc1.weight in the middle) against plain data
    parallel and one rank; optimizer state is compared in full (the
    checkpoint gathers the shards)."""
    def zspec(ranks, zero):
        return spec(ranks, optimizer=OPTIMIZERS[opt], batch={"global": 384},
                    parallel={"ranks": ranks, "zero_stage": zero})
    runs = {"one": (zspec(1, 0), 0), "plain2": (zspec(2, 0), None), "zero2": (zspec(2, 1), None),
            "zero3": (zspec(3, 1), None)}
    for name, (s, ranks) in runs.items():
        out = run(trainer, mpirun, s, tmp_path / name, ranks)
        assert out.returncode == EXIT_OK, f"{name}: {out.stderr[-3000:]}"
    assert "reduce-scattered (ZeRO-1)" in out.stdout and "sharded" in out.stdout, out.stdout
    base, _ = params(tmp_path / "one", 20)
    assert any(k.startswith("optim.") for k in base), "the optimizer state is checkpointed"
    # Adam's m / sqrt(v) turns the last bits of a tiny gradient (the fp32
    # sums' order differs with the rank count) into a visible step
    rel = 2e-4 if opt in ("adamw", "lamb") else 2e-5
    for name in runs:
        assert_close(base, params(tmp_path / name, 20)[0], name, rel)
    # the ratios are not all 1 (the test would not see partial norms otherwise)
    plain, _ = params(tmp_path / "plain2", 20)
    assert_close(plain, params(tmp_path / "zero2", 20)[0], "zero2 vs plain2", rel=1e-6)


def test_fp16_zero1_matches_fp16_plain_and_bf16_runs(trainer, mpirun, tmp_path):
    """16-bit compute over 2 ranks: ZeRO-1 ends where plain data parallel does
    (the same sums of the same 16-bit gradients), both near fp32; bf16 runs
    without a loss scale."""
    def pspec(dtype, zero):
        return spec(2, steps=30, precision={"compute": dtype},
                    parallel={"ranks": 2, "zero_stage": zero})
    for name, s in {"fp16": pspec("fp16", 0), "fp16z": pspec("fp16", 1),
                    "bf16z": pspec("bf16", 1), "fp32": pspec("fp32", 0)}.items():
        out = run(trainer, mpirun, s, tmp_path / name)
        assert out.returncode == EXIT_OK, f"{name}: {out.stderr[-3000:]}"
    plain, meta = params(tmp_path / "fp16", 30)
    zero, zmeta = params(tmp_path / "fp16z", 30)
    assert_close(plain, zero, "fp16 zero vs plain", rel=1e-6)
    assert meta["loss_scale"] == zmeta["loss_scale"] and meta["skipped_steps"] == zmeta["skipped_steps"]
    assert float(meta["loss_scale"]) in (2.0 ** 14, 2.0 ** 15, 2.0 ** 16), meta
    # a skipped step shifts the whole trajectory, and 30 steps is early:
    # a coarse check of what was learnt (the 0.3-point figures come from
    # tests/bench/bench_precision.sh over whole runs)
    acc = {name: result(tmp_path / name)["final"]["val/accuracy"] for name in ("fp32", "fp16", "bf16z")}
    assert abs(acc["fp16"] - acc["fp32"]) < 0.06 and abs(acc["bf16z"] - acc["fp32"]) < 0.06, acc
    _, bmeta = params(tmp_path / "bf16z", 30)
    assert "loss_scale" not in bmeta
    names = {m["name"] for m in metrics(tmp_path / "fp16z")}
    assert {"train/loss_scale", "train/skipped_steps"} <= names
    assert "train/loss_scale" not in {m["name"] for m in metrics(tmp_path / "bf16z")}


def test_fp16_overflow_skips_the_step_and_halves_the_scale(trainer, mpirun, tmp_path):
    """A loss scale of 2^32 makes the scaled gradients overflow fp16 (max
    65504): each such step is skipped (parameters unchanged) and the scale
    halves, until it fits; then 5 clean steps double it (growth_interval 5),
    and so on. Checked on every step's metrics and checkpoints, 2 ranks
    with ZeRO-1."""
    s = spec(2, steps=40, checkpoint_every=1, keep_checkpoints=100,
             precision={"compute": "fp16", "init_scale": 2 ** 32, "growth_interval": 5},
             parallel={"ranks": 2, "zero_stage": 1})
    job = tmp_path / "job"
    out = run(trainer, mpirun, s, job)
    assert out.returncode == EXIT_OK, out.stderr[-3000:]
    series = collections.defaultdict(dict)
    for m in metrics(job):
        series[m["name"]][m["step"]] = m["value"]
    scale, skipped = series["train/loss_scale"], series["train/skipped_steps"]
    assert scale[1] == 2.0 ** 32 and skipped[1] == 1
    clean = 0
    for step in range(1, 40):
        was_skipped = skipped[step] > skipped.get(step - 1, 0)
        ckpt, _ = params(job, step)
        if step > 1:
            before, _ = params(job, step - 1)
            same = all(ckpt[k].tobytes() == before[k].tobytes() for k in ckpt if k.startswith("param."))
            assert same == was_skipped, (step, was_skipped)
        if was_skipped:
            assert scale[step + 1] == scale[step] / 2, step
            assert step not in series["train/grad_norm"], "no grad norm for a skipped step"
            clean = 0
        else:
            clean += 1
            want = scale[step] * 2 if clean == 5 else scale[step]
            clean %= 5
            assert scale[step + 1] == want, (step, scale[step], scale[step + 1])
    # 2^32 down to about 2^14 (some 18 halvings), then regrowth and an overflow now and then
    assert 15 <= skipped[40] <= 30 and scale[40] <= 2.0 ** 18, (skipped[40], scale[40])
    _, meta = params(job, 40)
    assert meta["skipped_steps"] == str(int(skipped[40]))


def test_only_rank0_writes_and_prints(trainer, mpirun, tmp_path):
    job = tmp_path / "job"
    out = run(trainer, mpirun, spec(2, steps=20), job)
    assert out.returncode == EXIT_OK, out.stderr
    assert out.stdout.count("step 20/20") == 1 and out.stdout.count("larch-train: dp:") == 1
    assert "parallel: 2 ranks over mpi" in out.stdout
    assert "\ncomm:" not in out.stdout, "MPI is a cluster's data path: no caveat"
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


@pytest.mark.parametrize("mode", ["fp32", "zero1-fp16"])
def test_signal_stops_all_ranks_and_resume_is_bit_exact(trainer, mpirun, tmp_path, started, mode):
    """SIGUSR1 (Slurm's warning; mpirun forwards it, and exits with the ranks'
    status 3): every rank stops at the same step, rank 0 checkpoints (with
    ZeRO-1 the shards gathered; with fp16 the loss scaler's state too)."""
    s = spec(2, steps=600, hidden=(256,), log_every=10, checkpoint_every=200)
    if mode == "zero1-fp16":
        s.update(parallel={"ranks": 2, "zero_stage": 1},
                 optimizer={"type": "adamw", "lr": 0.002, "weight_decay": 0.01},
                 precision={"compute": "fp16", "growth_interval": 50})
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
    assert ma.get("loss_scale") == mb.get("loss_scale")
    assert ma.get("skipped_steps") == mb.get("skipped_steps")
    seen = collections.Counter((m["step"], m["name"]) for m in metrics(resumed))
    assert max(seen.values()) == 1


def test_a_rank_killed_ends_the_run_then_it_resumes(trainer, mpirun, tmp_path, started):
    s = spec(2, steps=4000, log_every=10, checkpoint_every=100)
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


def test_local_executor_gives_a_job_one_slot_per_rank(tmp_path):
    """larchd with 2 local slots: a 2-rank job fills both, so a 1-rank job
    submitted after it starts only once it has ended."""
    import requests
    from larchd import Larchd

    server = Larchd(tmp_path, args=["--max-local-jobs", "2"], env=mpi_env()).start()
    try:
        ids = []
        for ranks, steps in ((2, 150), (1, 5)):
            s = spec(ranks, steps=steps, hidden=(128,))
            r = requests.post(server.url + "/v1/jobs", json=s, headers=server.auth(), timeout=30)
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        deadline = time.monotonic() + 180
        while True:
            # one request: one snapshot of both (two GETs can straddle the
            # moment the first ends and the second starts)
            listed = requests.get(server.url + "/v1/jobs?limit=10", headers=server.auth(),
                                  timeout=30).json()["jobs"]
            by_id = {j["id"]: j for j in listed}
            jobs = [by_id[i] for i in ids]
            if all(j["state"] in ("COMPLETED", "FAILED", "CANCELLED") for j in jobs):
                break
            assert not (jobs[0]["state"] == "RUNNING" and jobs[1]["state"] == "RUNNING"), jobs
            assert time.monotonic() < deadline, jobs
            time.sleep(0.05)
        assert [j["state"] for j in jobs] == ["COMPLETED", "COMPLETED"], jobs
        assert jobs[1]["started_at"] >= jobs[0]["ended_at"], jobs
    finally:
        server.stop()
