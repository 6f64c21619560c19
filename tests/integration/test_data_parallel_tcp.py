"""Data parallel larch-train without MPI: the tasks of an srun step (trainer/
comm_tcp.c), here real processes given the environment srun gives its tasks
(SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_JOB_ID, SLURM_STEP_ID). They meet
through a file in the job dir and reduce over TCP through rank 0; with two
ranks every sum is the same as MPI's (a + b), so the checkpoints must equal
the mpirun run's byte for byte. A task killed ends the others; tasks that
never meet give up with a message.
"""
import itertools
import os
import signal
import socket
import subprocess
import time

import pytest

from test_data_parallel import params, run, spec

EXIT_OK, EXIT_USAGE = 0, 2
_job_ids = itertools.count(int(time.time()) % 100000 * 10)


def task_env(rank, tasks, job_id, **extra):
    """os.environ without MPI's launcher variables, plus srun's task ones."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OMPI_", "PMIX_", "PMI_", "SLURM_"))}
    env.update(SLURM_PROCID=str(rank), SLURM_STEP_NUM_TASKS=str(tasks), SLURM_JOB_ID=str(job_id),
               SLURM_STEP_ID="0", **extra)
    return env


def start_tasks(trainer, s, job, tasks=None, ranks=None, job_id=None, **extra):
    """The step's tasks (ranks: which of them to start), as srun would; of
    Slurm job job_id (default: a new one)."""
    tasks = tasks or s["parallel"]["ranks"]
    path = trainer.write_spec(s, name=f"{job.name}.json")
    job_id = job_id or next(_job_ids)
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(job), "--threads", "1"]
    return [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             env=task_env(r, tasks, job_id, **extra), start_new_session=True)
            for r in (ranks if ranks is not None else range(tasks))]


def finish(procs, timeout=300):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            out, err = p.communicate()
        outs.append((p.returncode, out, err))
    return outs


@pytest.mark.parametrize("zero", [0, 1])
def test_srun_tasks_without_mpi_match_mpirun(trainer, mpirun, tmp_path, zero):
    s = spec(2, steps=20, micro=64, checkpoint_every=10,
             parallel={"ranks": 2, "zero_stage": zero, "bucket_mb": 0.05})
    out = run(trainer, mpirun, s, tmp_path / "mpi")
    assert out.returncode == EXIT_OK, out.stderr[-3000:]
    job = tmp_path / "tcp"
    (rc0, out0, err0), (rc1, out1, err1) = finish(start_tasks(trainer, s, job))
    assert rc0 == EXIT_OK and rc1 == EXIT_OK, (err0[-2000:], err1[-2000:])
    assert "2 ranks over tcp (started by srun)" in out0, out0
    assert "\ncomm: tcp star through rank 0 (the fallback without MPI or NCCL" in out0, out0
    assert out1 == "", "only rank 0 prints"
    for step in (10, 20):
        want = (tmp_path / "mpi" / "checkpoints" / f"step-{step:08d}.safetensors").read_bytes()
        got = (job / "checkpoints" / f"step-{step:08d}.safetensors").read_bytes()
        assert got == want, f"step {step}: the checkpoints differ"
    assert not list(job.glob(".comm-*")), "the rendezvous file is removed once all are in"
    tensors, meta = params(job, 20)
    assert int(meta["step"]) == 20


def test_a_task_killed_ends_the_others(trainer, tmp_path):
    s = spec(2, steps=100000, hidden=(256,), log_every=10)
    procs = start_tasks(trainer, s, tmp_path / "job")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and not (tmp_path / "job" / "metrics.jsonl").exists():
        time.sleep(0.2)
    time.sleep(1)
    assert all(p.poll() is None for p in procs), "both tasks train"
    os.kill(procs[1].pid, signal.SIGKILL)
    t0 = time.monotonic()
    (rc0, _, err0), _ = finish(procs, timeout=60)
    assert time.monotonic() - t0 < 30, "the other task must not wait forever"
    assert rc0 not in (0, None)
    assert "rank 1 is gone" in err0, err0[-2000:]


def test_a_silent_stranger_on_the_port_does_not_hold_the_rendezvous(trainer, tmp_path):
    """A connection to rank 0's port that never says hello (a port scanner,
    a stray process) is dropped after a few seconds, and the ranks meet."""
    s = spec(2, steps=3)
    job = tmp_path / "job"
    job_id = next(_job_ids)
    procs = start_tasks(trainer, s, job, ranks=[0], job_id=job_id, LARCH_COMM_TIMEOUT="60")
    deadline = time.monotonic() + 60
    files = []
    while time.monotonic() < deadline and not files:
        files = [f for f in job.glob(".comm-*") if ".tmp" not in f.name]
        time.sleep(0.1)
    assert files, "rank 0 wrote its rendezvous file"
    host, port, _ = files[0].read_text().split()
    stranger = socket.create_connection((host, int(port)), timeout=10)
    try:
        time.sleep(0.5)                # rank 0 has accepted it and waits for its hello
        procs += start_tasks(trainer, s, job, ranks=[1], job_id=job_id,
                             LARCH_COMM_TIMEOUT="60")
        t0 = time.monotonic()
        outs = finish(procs, timeout=120)
        assert all(rc == EXIT_OK for rc, _, _ in outs), [err[-2000:] for _, _, err in outs]
        assert time.monotonic() - t0 < 60
    finally:
        stranger.close()


def test_tasks_that_never_meet_give_up(trainer, tmp_path):
    s = spec(2, steps=5)
    t0 = time.monotonic()
    [(rc, _, err)] = finish(start_tasks(trainer, s, tmp_path / "alone", ranks=[1],
                                        LARCH_COMM_TIMEOUT="2"), timeout=60)
    assert time.monotonic() - t0 < 30
    assert rc == EXIT_USAGE and "could not join rank 0 in 2 s" in err, (rc, err[-2000:])
    [(rc, _, err)] = finish(start_tasks(trainer, s, tmp_path / "three", tasks=3, ranks=[0]),
                            timeout=60)
    assert rc == EXIT_USAGE and "Slurm started 3 tasks" in err, (rc, err[-2000:])
