"""Checkpoint and resume: a run stopped by a signal and resumed ends bit-identical
to one that never stopped (same thread count), and its reports stay consistent."""
import collections
import signal
import subprocess

import numpy as np
import pytest

from datasets import read_safetensors, write_image_set
from jobdir import metrics, result

THREADS = "2"
EXIT_OK, EXIT_INTERRUPTED = 0, 3


def run_straight(trainer, spec_path, job):
    out = subprocess.run([str(trainer.exe), "--spec", str(spec_path), "--job-dir", str(job),
                          "--threads", THREADS, "--quiet"], capture_output=True, text=True, timeout=600)
    assert out.returncode == EXIT_OK, out.stderr
    return out


def run_interrupted(trainer, spec_path, job, sig, after_step):
    """Starts a run, sends sig once it reports step >= after_step, and waits."""
    proc = subprocess.Popen([str(trainer.exe), "--spec", str(spec_path), "--job-dir", str(job),
                             "--threads", THREADS], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    for line in proc.stdout:
        if line.startswith("step ") and int(line.split()[1].split("/")[0]) >= after_step:
            proc.send_signal(sig)
            break
    stdout, stderr = proc.communicate(timeout=600)
    return proc.returncode, stderr


def assert_same_checkpoint(a, b):
    ta, ma = read_safetensors(a)
    tb, mb = read_safetensors(b)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].tobytes() == tb[name].tobytes(), f"{name} differs after resume"
    for key in ("step", "epoch", "pos", "t", "spec_hash"):
        assert ma[key] == mb[key], key


def check_resume(trainer, tmp_path, spec, steps, sig=signal.SIGTERM, after_step=None):
    spec_path = trainer.write_spec(spec)
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    run_straight(trainer, spec_path, straight)

    code, stderr = run_interrupted(trainer, spec_path, resumed, sig, after_step or steps // 3)
    assert code == EXIT_INTERRUPTED, stderr
    assert "checkpoint written" in stderr
    first = result(resumed)
    assert first["status"] == "interrupted" and first["exit_code"] == EXIT_INTERRUPTED
    stopped_at = first["steps"]
    assert 0 < stopped_at < steps
    assert (resumed / "checkpoints" / f"step-{stopped_at:08d}.safetensors").exists()

    out = subprocess.run([str(trainer.exe), "--spec", str(spec_path), "--job-dir", str(resumed),
                          "--threads", THREADS, "--resume"], capture_output=True, text=True, timeout=600)
    assert out.returncode == EXIT_OK, out.stderr
    assert f"resume: from" in out.stdout and f"(step {stopped_at})" in out.stdout
    assert result(resumed)["status"] == "completed"

    final = f"step-{steps:08d}.safetensors"
    assert_same_checkpoint(straight / "checkpoints" / final, resumed / "checkpoints" / final)

    # every (step, metric) once, and the per-step training figures identical
    seen = collections.Counter((m["step"], m["name"]) for m in metrics(resumed))
    assert max(seen.values()) == 1, [k for k, v in seen.items() if v > 1][:5]
    per_step = lambda job: {(m["step"], m["name"]): m["value"] for m in metrics(job)
                            if m["name"] in ("train/loss", "train/lr", "train/grad_norm")}
    assert per_step(straight) == per_step(resumed)
    assert result(straight)["final"] == result(resumed)["final"]


# The runs are sized so that a step takes ~10-20 ms: long enough that the
# signal, sent when a progress line arrives, lands well before the last step.
def mlp_spec(data, optimizer, **over):
    spec = {
        "name": "resume-mlp",
        "model": {"type": "mlp", "hidden": [1024, 1024]},
        "data": data,
        "batch": {"global": 256, "micro": 128, "reference": 128},
        "optimizer": optimizer,
        "schedule": {"lr_scaling": "linear", "warmup": {"epochs": 1}, "decay": "cosine"},
        "steps": 48,
        "log_every": 1,
        "eval_every": 16,
        "checkpoint_every": 1000,
        "seed": 7,
    }
    spec.update(over)
    return spec


@pytest.mark.parametrize("optimizer", [
    {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
    {"type": "lamb", "lr": 0.01, "weight_decay": 0.01},
], ids=["sgd", "lamb"])
def test_mlp_resume_is_bit_exact(trainer, tmp_path, optimizer):
    data = write_image_set(tmp_path, n_train=2560, n_val=256, side=28)
    check_resume(trainer, tmp_path, mlp_spec(data, optimizer), steps=48)


def test_sigusr1_and_periodic_checkpoints(trainer, tmp_path):
    """Slurm's pre-emption warning is SIGUSR1; periodic checkpoints are pruned to keep_checkpoints."""
    data = write_image_set(tmp_path, n_train=2560, n_val=256, side=28)
    spec = mlp_spec(data, {"type": "adamw", "lr": 0.003, "weight_decay": 0.01},
                    checkpoint_every=5, keep_checkpoints=2)
    check_resume(trainer, tmp_path, spec, steps=48, sig=signal.SIGUSR1, after_step=22)
    kept = sorted(p.name for p in (tmp_path / "resumed" / "checkpoints").iterdir())
    assert len(kept) == 2 and kept[-1] == "step-00000048.safetensors", kept


def test_gpt_resume_is_bit_exact(trainer, tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(b"the quick brown fox jumps over the lazy dog. " * 200)
    spec = {
        "name": "resume-gpt",
        "model": {"type": "gpt", "layers": 2, "heads": 4, "dim": 128, "seq": 64},
        "data": {"format": "text", "path": str(corpus), "val_fraction": 0.1},
        "batch": {"global": 16, "micro": 8},
        "optimizer": {"type": "adamw", "lr": 0.003, "weight_decay": 0.1, "clip_grad_norm": 1.0},
        "schedule": {"warmup": {"steps": 5}, "decay": "cosine"},
        "steps": 30,
        "log_every": 1,
        "checkpoint_every": 1000,
        "seed": 3,
    }
    check_resume(trainer, tmp_path, spec, steps=30)


def test_no_checkpoint_at_the_end_when_asked(trainer, tmp_path):
    """checkpoint_at_end false: periodic checkpoints only, none for the end,
    and the run still completes with its result; the default writes it."""
    data = write_image_set(tmp_path, n_train=512, n_val=64, side=8)
    for at_end, want in ((False, ["step-00000005.safetensors"]),
                         (True, ["step-00000005.safetensors", "step-00000008.safetensors"])):
        spec = mlp_spec(data, {"type": "sgd", "lr": 0.05}, checkpoint_every=5,
                        checkpoint_at_end=at_end, steps=8)
        job = tmp_path / f"at-end-{at_end}"
        run_straight(trainer, trainer.write_spec(spec, name=f"{job.name}.json"), job)
        assert sorted(p.name for p in (job / "checkpoints").iterdir()) == want
        assert result(job)["status"] == "completed" and result(job)["steps"] == 8
