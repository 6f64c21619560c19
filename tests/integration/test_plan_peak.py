"""The memory plan is never below what a run holds: for small CPU specs the
kernel's high-water mark of a real run's resident memory is at most the
plan's host total, and the plan at most 10% above it (trainer/spec/plan.h counts
the runtime's own memory and the loader's, not only the model's), so that
larchd's 422 at submit can be trusted both ways. Memory, not time: a fair
pass/fail test."""
import json
import re
import subprocess

import pytest

from larchd import BUILD

MIB = 1024 * 1024


def corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(bytes(range(256)) * 400)
    return path


def gpt(tmp_path, layers, heads, dim, seq, micro):
    return {"name": "gpt", "model": {"type": "gpt", "layers": layers, "heads": heads,
                                     "dim": dim, "seq": seq},
            "data": {"format": "text", "path": str(corpus(tmp_path)), "val_fraction": 0.05},
            "batch": {"global": micro, "micro": micro},
            "optimizer": {"type": "adamw", "lr": 1e-3}, "steps": 2, "log_every": 1}


SPECS = {
    # the loader's peak: Fashion-MNIST's idx bytes beside its floats
    "fmnist-quick": lambda tmp_path: {
        "name": "fmnist-quick", "model": {"type": "mlp", "hidden": [256]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9}, "steps": 2, "log_every": 1},
    # the runtime's own memory is most of it
    "gpt-small": lambda tmp_path: gpt(tmp_path, 2, 2, 64, 64, 8),
    # the model's items and the BLAS's buffers
    "gpt-tiny": lambda tmp_path: gpt(tmp_path, 4, 4, 256, 256, 16),
}


@pytest.mark.parametrize("name", sorted(SPECS))
def test_plan_is_at_least_the_peak_and_within_10_percent(tmp_path, larch_train, name):
    spec = SPECS[name](tmp_path)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = subprocess.run([str(BUILD / "service" / "larch"), "plan", str(path), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    plan = json.loads(out.stdout)
    run = subprocess.run([str(larch_train), "--spec", str(path), "--job-dir",
                          str(tmp_path / "job")], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    # the trainer's own high-water mark (VmHWM, which exec starts afresh:
    # ru_maxrss of the child would count the forking Python's pages)
    said = re.search(r"^memory: peak resident ([\d.]+) MiB, planned ([\d.]+) MiB", run.stdout,
                     re.M)
    assert said, run.stdout[-2000:]
    peak, planned = float(said.group(1)) * MIB, plan["host_bytes_per_rank"]
    assert abs(float(said.group(2)) * MIB - planned) < 0.1 * MIB
    print(f"{name}: plan {planned / MIB:.1f} MiB, peak resident {peak / MIB:.1f} MiB "
          f"(plan/peak {planned / peak:.3f})")
    assert peak <= planned <= 1.10 * peak, \
        f"plan {planned / MIB:.1f} MiB vs peak {peak / MIB:.1f} MiB ({plan['items']})"
