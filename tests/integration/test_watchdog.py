"""The numerics watchdog of larch-train (spec section "watchdog"): a loss
spike rolls the run back to its last checkpoint and skips the batches since
(one rank, and two ranks with ZeRO-1 that must roll back together); a run
that keeps diverging rolls back to its initial weights max_rollbacks times
and then fails with the reason; an update that followed backward is rolled
back as well."""
import collections
import shutil
import subprocess

import numpy as np
import pytest

from datasets import read_safetensors, write_idx
from jobdir import metrics, result
from mpi import mpi_env

EXIT_OK, EXIT_DIVERGED = 0, 4


def poisoned_set(directory, bad_step, n=4096, batch=256, side=12, seed=3):
    """An easy image set (one mean image per class) read in order, whose
    batch of step bad_step (1-based) has every label moved by 5: a model that
    has learnt the rest scores it far worse than anything before."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(40, 215, size=(10, side, side))
    labels = rng.integers(0, 10, size=n)
    images = np.clip(means[labels] + rng.normal(0, 20, size=(n, side, side)), 0, 255)
    bad = slice((bad_step - 1) * batch, bad_step * batch)
    labels[bad] = (labels[bad] + 5) % 10
    paths = {"images": str(directory / "images.idx"), "labels": str(directory / "labels.idx")}
    write_idx(paths["images"], images.astype(np.uint8))
    write_idx(paths["labels"], labels.astype(np.uint8))
    return {"format": "idx", "train": paths, "val_fraction": 0.0, "shuffle": False}


def train(trainer, s, job, ranks=1):
    path = trainer.write_spec(s, name=f"{job.name}.json")
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(job), "--threads", "1"]
    if ranks > 1:
        mpirun = shutil.which("mpirun")
        assert mpirun, "mpirun is missing: run deploy/install-deps.sh (openmpi-bin)"
        cmd = [mpirun, "-n", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=mpi_env())


@pytest.mark.parametrize("ranks", [1, 2])
def test_a_loss_spike_rolls_back_and_skips_the_batches(trainer, tmp_path, ranks):
    data = poisoned_set(tmp_path, bad_step=12)
    s = {"name": "spike", "model": {"type": "mlp", "hidden": [32]}, "data": data,
         "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
         "steps": 15, "log_every": 1, "checkpoint_every": 10, "seed": 1,
         "watchdog": {"max_rollbacks": 2, "spike_factor": 3, "window": 5},
         "parallel": {"ranks": ranks, "zero_stage": 1 if ranks > 1 else 0}}
    job = tmp_path / "job"
    out = train(trainer, s, job, ranks)
    assert out.returncode == EXIT_OK, out.stderr[-3000:]
    lines = [l for l in out.stdout.splitlines() if l.startswith("watchdog:")]
    assert len(lines) == 1, out.stdout
    assert lines[0].startswith("watchdog: step 12: loss ") and "its moving average" in lines[0]
    assert "rolled back to step 10" in lines[0] and "skipping the 2 batches" in lines[0]
    series = collections.defaultdict(dict)
    counts = collections.Counter()
    for m in metrics(job):
        series[m["name"]][m["step"]] = m["value"]
        counts[(m["name"], m["step"])] += 1
    assert max(counts.values()) == 1, "one value per metric and step"
    assert series["train/rollbacks"] == {12: 1}
    assert 12 not in series["train/loss"], "the spiking loss is not recorded"
    assert sorted(series["train/loss"]) == [s for s in range(1, 16) if s != 12]
    # the batches after the rollback are clean again: no loss near the spike
    spike = float(lines[0].split("loss ")[1].split()[0])
    assert max(series["train/loss"][k] for k in (13, 14, 15)) < spike / 3
    assert result(job)["status"] == "completed" and result(job)["steps"] == 15


def test_divergence_exhausts_the_rollbacks_then_fails(trainer, tmp_path):
    data = poisoned_set(tmp_path, bad_step=1000)       # clean: the lr is what diverges
    s = {"name": "diverge", "model": {"type": "mlp", "hidden": [32]}, "data": data,
         "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 100, "momentum": 0.9},
         "steps": 40, "log_every": 1, "seed": 1, "watchdog": {"max_rollbacks": 2}}
    job = tmp_path / "job"
    out = train(trainer, s, job)
    assert out.returncode == EXIT_DIVERGED, (out.returncode, out.stderr[-3000:])
    lines = [l for l in out.stdout.splitlines() if l.startswith("watchdog:")]
    assert len(lines) == 2, out.stdout
    assert all("rolled back to step 0 (the initial weights)" in l for l in lines), lines
    assert "the loss is nan" in out.stderr or "the loss is inf" in out.stderr, out.stderr
    assert "2 rollbacks already (watchdog.max_rollbacks): giving up" in out.stderr, out.stderr
    res = result(job)
    assert res["status"] == "failed" and "giving up" in res["reason"]


def test_a_spike_rolls_back_an_update_that_followed_backward(trainer, tmp_path):
    """With both offloads (one rank, one micro-batch, no clipping) the step
    that spikes has updated every tensor during its backward already: the
    rollback to the checkpoint undoes that, and the run ends with the bits
    of the same run without offload."""
    data = poisoned_set(tmp_path, bad_step=12)
    s = {"name": "spike", "model": {"type": "mlp", "hidden": [32, 24]}, "data": data,
         "batch": {"global": 256}, "optimizer": {"type": "adamw", "lr": 0.01},
         "precision": {"compute": "bf16"},
         "steps": 15, "log_every": 1, "checkpoint_every": 10, "seed": 1,
         "watchdog": {"max_rollbacks": 2, "spike_factor": 3, "window": 5}}
    jobs = {}
    for name, offload in (("plain", {}), ("streamed", {"optimizer": "cpu", "params": "cpu"})):
        jobs[name] = tmp_path / name
        out = train(trainer, dict(s, name=name, offload=offload), jobs[name])
        assert out.returncode == EXIT_OK, out.stderr[-3000:]
        assert "rolled back to step 10" in out.stdout, out.stdout
        assert ("the update follows backward" in out.stdout) == (name == "streamed")
    final = {name: read_safetensors(job / "checkpoints" / "step-00000015.safetensors")[0]
             for name, job in jobs.items()}
    for tensor, value in final["plain"].items():
        assert value.tobytes() == final["streamed"][tensor].tobytes(), tensor
    losses = {name: [(m["step"], m["value"]) for m in metrics(job) if m["name"] == "train/loss"]
              for name, job in jobs.items()}
    assert losses["plain"] == losses["streamed"]
