"""Elastic resume (parallel.elastic, docs/spec.md): a ZeRO-1 checkpoint
written by 4 ranks resumes on 2 with the global batch kept by doubling the
accumulation; that continuation is bit-exact against a fresh 2-rank run
resumed from a copy of the same checkpoint in a new job dir, consumes the
same examples as the 4-rank run's own continuation (parameters, optimizer
state and loader position within fp32 reduction order of it), and says why
in its header and result. Below min_ranks, or where the global batch cannot
be kept, the run is refused before it trains."""
import shutil
import subprocess

import numpy as np
import pytest
import requests

from datasets import read_safetensors
from jobdir import metrics, result
from larchd import Larchd, poll
from mpi import mpi_env

EXIT_OK, EXIT_USAGE = 0, 2
STEPS, RESUME_AT, GLOBAL, MICRO = 12, 6, 128, 16


def spec():
    return {"name": "shrink", "model": {"type": "mlp", "hidden": [32]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": GLOBAL, "micro": MICRO},
            "optimizer": {"type": "adamw", "lr": 0.002, "weight_decay": 0.01},
            "steps": STEPS, "checkpoint_every": RESUME_AT, "keep_checkpoints": 10,
            "log_every": 1, "seed": 11,
            "parallel": {"ranks": 4, "zero_stage": 1, "elastic": {"min_ranks": 2}}}


def run(trainer, mpirun, job, ranks):
    path = trainer.write_spec(spec(), name="elastic.json")
    cmd = [mpirun, "-n", str(ranks), str(trainer.exe), "--spec", str(path), "--job-dir", str(job),
           "--threads", "1"]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=mpi_env())


def ckpt(job, step):
    return read_safetensors(job / "checkpoints" / f"step-{step:08d}.safetensors")


def losses(job):
    return [(m["step"], m["value"]) for m in metrics(job) if m["name"] == "train/loss"]


def test_zero1_checkpoint_of_4_ranks_resumes_on_2(trainer, mpirun, tmp_path):
    four = tmp_path / "four"
    out = run(trainer, mpirun, four, 4)
    assert out.returncode == EXIT_OK, out.stderr[-3000:]
    assert "\nelastic:" not in out.stdout
    _, meta = ckpt(four, RESUME_AT)
    assert meta["ranks"] == "4"

    # the job dir as the 4-rank run left it at step 6 (the later checkpoint
    # gone, as if it had stopped there), and a new dir with only a copy of
    # that checkpoint: the fresh 2-rank run from it
    elastic, fresh = tmp_path / "elastic", tmp_path / "fresh"
    shutil.copytree(four, elastic)
    (elastic / "checkpoints" / f"step-{STEPS:08d}.safetensors").unlink()
    (elastic / "result.json").unlink()
    (fresh / "checkpoints").mkdir(parents=True)
    name = f"step-{RESUME_AT:08d}.safetensors"
    shutil.copy(four / "checkpoints" / name, fresh / "checkpoints" / name)

    outs = {job.name: run(trainer, mpirun, job, 2) for job in (elastic, fresh)}
    for job, o in outs.items():
        assert o.returncode == EXIT_OK, (job, o.stderr[-3000:])
        assert ("elastic: 2 of the spec's 4 ranks started (parallel.elastic.min_ranks 2): "
                "accumulation 2 -> 4, global batch 128 kept") in o.stdout, o.stdout
        assert "batch 128 = micro 16 x 2 ranks x 4 accum" in o.stdout, o.stdout
        assert f"(step {RESUME_AT}), written by 4 ranks, resharded over 2" in o.stdout, o.stdout
    assert result(elastic)["reason"].startswith("elastic: 2 of the spec's 4 ranks started")

    # bit-exact against the fresh run: parameters, optimizer state, metadata
    e, emeta = ckpt(elastic, STEPS)
    f, fmeta = ckpt(fresh, STEPS)
    assert any(k.startswith("optim.m.") for k in e) and any(k.startswith("optim.v.") for k in e)
    assert e.keys() == f.keys()
    for k in e:
        assert np.array_equal(e[k], f[k]), k
    assert emeta == fmeta and emeta["ranks"] == "2"
    assert losses(fresh) == [(s, v) for s, v in losses(elastic) if s > RESUME_AT]

    # the step count and the data: steps 1..12 once each in the resumed job
    # dir's metrics; the loader where the 4-rank run's is; each step the same
    # 128 examples, so the state is the 4-rank continuation's but for the
    # order of fp32 sums: about 1e-7 of each tensor's largest value here,
    # where the 6 steps since the checkpoint moved them by 1e-2 to 1
    assert [s for s, _ in losses(elastic)] == list(range(1, STEPS + 1))
    g, gmeta = ckpt(four, STEPS)
    for key in ("step", "epoch", "pos", "t"):
        assert emeta[key] == gmeta[key], key
    assert emeta["pos"] == str(STEPS * GLOBAL)
    for k, v in g.items():
        scale = float(np.abs(v).max()) or 1.0
        diff = float(np.abs(e[k] - v).max())
        assert diff <= 1e-5 * scale, (k, diff, scale)
    four_losses = dict(losses(four))
    for s, v in losses(elastic):
        assert abs(v - four_losses[s]) <= 1e-4 * abs(four_losses[s]), (s, v, four_losses[s])


def test_fewer_than_min_ranks_or_a_batch_not_kept_is_refused(trainer, mpirun, tmp_path):
    below = run(trainer, mpirun, tmp_path / "one", 1)
    assert below.returncode == EXIT_USAGE, below.stderr[-2000:]
    assert ("parallel.elastic.min_ranks: the launcher started 1 processes, and the spec runs "
            "on 2 to 4 ranks") in below.stderr, below.stderr[-2000:]
    # 128 = 16 x accum x 3 has no integral accum
    three = run(trainer, mpirun, tmp_path / "three", 3)
    assert three.returncode == EXIT_USAGE, three.stderr[-2000:]
    assert ("parallel.elastic: 3 ranks started, and batch.global is not a multiple of "
            "batch.micro x 3 (got 128, 16 x 3): the global batch cannot be kept") in three.stderr
    for job in ("one", "three"):
        assert not (tmp_path / job / "checkpoints").exists()


def test_larchd_records_why_in_the_jobs_events(tmp_path):
    """Through larchd (local executor) whose mpirun starts 2 ranks whatever
    it is asked for, as a launcher on a cluster with fewer free slots would:
    the 4-rank elastic job completes on 2, and its events carry the old and
    new rank count (the trainer's result note)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    real = shutil.which("mpirun")
    wrapper = bin_dir / "mpirun"
    wrapper.write_text(f'#!/bin/sh\n[ "$1" = -n ] && shift 2\nexec {real} -n 2 "$@"\n')
    wrapper.chmod(0o755)
    env = mpi_env()
    env["PATH"] = f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}"
    d = Larchd(tmp_path, args=["--run-as", "service"], env=env).start()
    try:
        s = spec()
        s["checkpoint_every"] = 0
        r = requests.post(d.url + "/v1/jobs", headers=d.auth(), json=s, timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        j = poll(lambda: requests.get(f"{d.url}/v1/jobs/{jid}", headers=d.auth(), timeout=10).json(),
                 lambda j: j["state"] in ("COMPLETED", "FAILED", "CANCELLED"), 180,
                 lambda j: f"{jid} still {j['state']}\n{d.log()[-2000:]}")
        assert j["state"] == "COMPLETED", (j, d.log()[-2000:])
        events = requests.get(f"{d.url}/v1/jobs/{jid}/events", headers=d.auth(),
                              timeout=10).json()["events"]
        notes = [e for e in events if e["by"] == "trainer" and e["from"] == e["to"] == "RUNNING"]
        assert len(notes) == 1, events
        assert notes[0]["reason"].startswith(f"result: completed, {STEPS} steps"), notes
        assert ("elastic: 2 of the spec's 4 ranks started (parallel.elastic.min_ranks 2): "
                "accumulation 2 -> 4, global batch 128 kept") in notes[0]["reason"], notes
    finally:
        d.stop()


@pytest.mark.parametrize("via", ["libslurm", "sbatch"])
def test_slurm_starts_an_elastic_job_on_the_nodes_it_has(tmp_path, slurm_cluster, via):
    """4 ranks over 2 nodes, min_ranks 2, on the one-node dev cluster: larchd
    asks Slurm for 1 to 2 nodes of 2 tasks' CPUs each (sbatch --nodes=1-2
    --cpus-per-task=2, or libslurm's min/max nodes), Slurm starts it on the
    one node it has, the batch script launches 2 tasks a node, and
    the run completes on 2 ranks with the batch kept, saying so in its events."""
    s = spec()
    s["checkpoint_every"] = 0
    s["resources"] = {"nodes": 2}
    d = Larchd(tmp_path, args=["--executor", "slurm", "--slurm-poll-ms", "300",
                               "--slurm-submit", via],
               env=dict(slurm_cluster.env, OMPI_MCA_btl_vader_single_copy_mechanism="none")).start()
    try:
        r = requests.post(d.url + "/v1/jobs", headers=d.auth(), json=s, timeout=30)
        assert r.status_code == 201, r.text
        jid = r.json()["id"]
        j = poll(lambda: requests.get(f"{d.url}/v1/jobs/{jid}", headers=d.auth(), timeout=10).json(),
                 lambda j: j["state"] in ("COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"), 180,
                 lambda j: f"{jid} still {j['state']} ({j['reason']})\n{d.log()[-2000:]}")
        job_dir = d.state_dir / "jobs" / jid
        out = (job_dir / "stdout.log").read_text()
        assert j["state"] == "COMPLETED", (j, out[-2000:], (job_dir / "stderr.log").read_text()[-2000:])
        assert ("--ntasks=$(( ${SLURM_JOB_NUM_NODES:-2} * 2 )) --ntasks-per-node=2 "
                "--cpus-per-task=1") in (job_dir / "slurm.sh").read_text()
        show = slurm_cluster.run("scontrol", "-o", "show", "job", j["slurm_job_id"], check=False)
        if show.returncode == 0:            # (until MinJobAge forgets it)
            assert "NumNodes=1 " in show.stdout and "NumCPUs=2 " in show.stdout, show.stdout
        assert ("elastic: 2 of the spec's 4 ranks started (parallel.elastic.min_ranks 2): "
                "accumulation 2 -> 4, global batch 128 kept") in out, out[-2000:]
        assert out.count(f"step {STEPS}/{STEPS}") == 1, out[-2000:]
        events = requests.get(f"{d.url}/v1/jobs/{jid}/events", headers=d.auth(),
                              timeout=10).json()["events"]
        assert any(e["by"] == "trainer" and "elastic: 2 of the spec's 4 ranks" in e["reason"]
                   for e in events), events
    finally:
        d.stop()
