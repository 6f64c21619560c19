"""offload.activations (trainer/model.h, trainer/act_offload.h): "recompute"
and "cpu" train bit for bit what "none" trains, for gpt and the mlp, in
fp32 and bf16, on one rank and on two with ZeRO-1 (gradient buckets
reduced while backward goes on); they hold less activation memory, as the
start-up report says; and a recompute run resumes from its checkpoint
bit-exactly. tests/numeric/test_model_offload.py compares the gradients of
one forward and backward directly (C API)."""
import pathlib
import re
import shutil
import subprocess

import pytest

from datasets import read_safetensors, write_image_set
from jobdir import metrics
from mpi import mpi_env
from test_memory_report import memory_table

CORPUS = pathlib.Path("/usr/share/common-licenses/GPL-3")  # base-files, on every Debian
MODES = ("none", "recompute", "cpu")
STEPS = 6


def gpt_spec(mode, dtype="fp32", layers=4, **extra):
    s = {"name": "offload-gpt",
         "model": {"type": "gpt", "layers": layers, "heads": 2, "dim": 32, "seq": 32},
         "data": {"format": "text", "path": str(CORPUS), "val_fraction": 0.05},
         "batch": {"global": 16, "micro": 8},
         "optimizer": {"type": "adamw", "lr": 0.003, "clip_grad_norm": 1.0},
         "precision": {"compute": dtype},
         "offload": {"activations": mode},
         "steps": STEPS, "log_every": 2, "seed": 3}
    s.update(extra)
    return s


def mlp_spec(data, mode, dtype="fp32", activation="gelu", **extra):
    s = {"name": "offload-mlp",
         "model": {"type": "mlp", "hidden": [48, 40, 56, 32], "activation": activation},
         "data": data,
         "batch": {"global": 64, "micro": 32},
         "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
         "precision": {"compute": dtype},
         "offload": {"activations": mode},
         "steps": STEPS, "log_every": 2, "seed": 5}
    s.update(extra)
    return s


@pytest.fixture
def image_data(tmp_path):
    return write_image_set(tmp_path, n_train=512, n_val=64, side=8)


def train(trainer, spec, job, *args, mpirun=None):
    path = trainer.write_spec(spec, name=f"{job.name}.json")
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(job), "--threads", "1"]
    cmd += list(args)
    if mpirun:
        cmd = [mpirun, "-n", str(spec["parallel"]["ranks"])] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=mpi_env())
    assert out.returncode == 0, out.stderr
    return out


def final_checkpoint(job):
    return job / "checkpoints" / f"step-{STEPS:08d}.safetensors"


def assert_same_run(base, other, what, grad_norm_rel=0):
    """The same final checkpoint bits and losses; the same gradient norms,
    or within grad_norm_rel where other sums them in another order."""
    ta, _ = read_safetensors(final_checkpoint(base))
    tb, _ = read_safetensors(final_checkpoint(other))
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].tobytes() == tb[name].tobytes(), f"{what}: {name} differs"
    names = ("train/loss", "val/loss") + (() if grad_norm_rel else ("train/grad_norm",))
    losses = lambda job, names: [(m["step"], m["value"]) for m in metrics(job)
                                 if m["name"] in names]
    assert losses(base, names) == losses(other, names), what
    if grad_norm_rel:
        a, b = losses(base, ("train/grad_norm",)), losses(other, ("train/grad_norm",))
        assert [s for s, _ in a] == [s for s, _ in b] and a, what
        for (_, x), (_, y) in zip(a, b):
            assert y == pytest.approx(x, rel=grad_norm_rel), what


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("model", ["gpt", "mlp-gelu", "mlp-relu"])
def test_every_mode_trains_the_same_bits(trainer, image_data, tmp_path, model, dtype):
    jobs = {}
    for mode in MODES:
        if model == "gpt":
            s = gpt_spec(mode, dtype)
        else:
            s = mlp_spec(image_data, mode, dtype, activation=model.split("-")[1])
        jobs[mode] = tmp_path / mode
        train(trainer, s, jobs[mode])
    for mode in MODES[1:]:
        assert_same_run(jobs["none"], jobs[mode], f"{model} {dtype} {mode}")


@pytest.mark.parametrize("model,dtype", [("gpt", "fp32"), ("gpt", "bf16"), ("mlp-gelu", "fp32")])
def test_two_ranks_zero1_train_the_same_bits(trainer, image_data, tmp_path, mpirun, model, dtype):
    """Small buckets: many reductions start during backward, in the order
    the parameters' gradients become final, which recompute and cpu keep."""
    parallel = {"ranks": 2, "zero_stage": 1, "bucket_mb": 0.01}
    jobs = {}
    for mode in MODES:
        if model == "gpt":
            s = gpt_spec(mode, dtype, parallel=parallel)
        else:
            s = mlp_spec(image_data, mode, dtype, parallel=parallel)
        jobs[mode] = tmp_path / mode
        out = train(trainer, s, jobs[mode], mpirun=mpirun)
        assert "ZeRO-1" in out.stdout and "buckets" in out.stdout
    for mode in MODES[1:]:
        assert_same_run(jobs["none"], jobs[mode], f"2 ranks {model} {dtype} {mode}")


def test_memory_report_shows_the_smaller_activations(trainer, tmp_path):
    got = {}
    for layers in (4, 8):
        for mode in MODES:
            s = gpt_spec(mode, layers=layers, steps=1)
            s["model"].update(dim=64, seq=64, heads=4)
            s["batch"] = {"global": 16, "micro": 16}
            out = train(trainer, s, tmp_path / f"{mode}-{layers}")
            _, table = memory_table(out.stdout)
            act = table["activations"]
            none = re.search(r"\(none: ([\d.]+) MiB\)", act["note"])
            host = table.get("act_offload")
            got[mode, layers] = (act["mib"], float(none.group(1)) if none else None,
                                 host["mib"] if host else None)
            if host:
                assert host["where"] == "host" and "the host store" in host["note"], host
    for layers in (4, 8):
        none_mib = got["none", layers][0]
        assert got["none", layers][1] is None and got["none", layers][2] is None
        for mode in MODES[1:]:
            mib, none, _ = got[mode, layers]
            assert none == none_mib, (mode, layers, got)
            assert mib < none_mib, (mode, layers, got)
        # cpu moves all but two blocks' activations to the host store, nothing more
        mib, _, host = got["cpu", layers]
        assert host > 0 and abs(mib + host - none_mib) <= 0.02, got
    # four more blocks cost "none" four blocks of activations, "recompute"
    # four block inputs and "cpu" nothing more of the model's memory
    more = {mode: got[mode, 8][0] - got[mode, 4][0] for mode in MODES}
    assert more["recompute"] * 8 < more["none"], more
    assert more["cpu"] == 0, more


def test_recompute_resumes_bit_exactly(trainer, tmp_path):
    """A recompute run resumed from its step-2 checkpoint ends where the
    straight one does, and both where "none" does."""
    assert_resumes_bit_exactly(trainer, tmp_path, gpt_spec("recompute", "bf16", checkpoint_every=2),
                               gpt_spec("none", "bf16", checkpoint_every=2), "recompute")


def assert_resumes_bit_exactly(trainer, tmp_path, spec, plain_spec, what):
    """spec run straight, and resumed from its step-2 checkpoint, end with the
    same parameters, and those of plain_spec (the same run without what)."""
    straight, resumed, plain = tmp_path / "straight", tmp_path / "resumed", tmp_path / "plain"
    train(trainer, spec, straight)
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(straight / "checkpoints" / "step-00000002.safetensors", resumed / "checkpoints")
    out = train(trainer, spec, resumed, "--resume")
    assert "(step 2)" in out.stdout
    ta, _ = read_safetensors(final_checkpoint(straight))
    tb, _ = read_safetensors(final_checkpoint(resumed))
    for name in ta:
        assert ta[name].tobytes() == tb[name].tobytes(), f"{name} differs after resume"
    train(trainer, plain_spec, plain)
    tc, _ = read_safetensors(final_checkpoint(plain))
    for name in ta:
        assert ta[name].tobytes() == tc[name].tobytes(), f"{name}: {what} != none"
