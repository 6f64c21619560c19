"""larch-train end to end (trainer/train.c with data_idx.c, model_mlp.c,
optim.c, schedule.c, state.c): an MLP trained for 3 steps by the real
executable must match numpy doing the same to 1e-4.

The test writes a small IDX dataset (train plain, val gzip), the initial
weights as safetensors (spec "init"), and a spec with gradient accumulation
(global 16 = 2 x micro 8), no shuffling, linear lr scaling with warmup so the
lr changes every step, weight decay and, in some cases, gradient clipping.
numpy then standardises the pixels with the train split's mean and std,
runs the float64 MLP of ref_model.py on the same global batches (mean
cross-entropy over 16 samples), clips, and steps the ref_optim.py optimizer
with the ref_schedule.py lr.

Compared, each relative to the scale of the reference value: the final
parameters and optimizer moments in DIR/checkpoints/step-00000003.safetensors,
train/loss, train/lr and train/grad_norm of every step in metrics.jsonl, and
the final val/loss in result.json. fp32 forward/backward errors are near 1e-7
(test_model_mlp.py) and stay below 1e-6 through 3 optimizer steps (measured
at most 4e-7); the tolerance is TOL = 1e-4, the issue's figure, which still
sees the pixels standardised with the sample std (n - 1) instead of the
population std, a difference of 1.2e-4.
"""
import gzip
import json
import struct
import subprocess

import numpy as np
import pytest

import safetensors_np
from ref_model import mlp_loss_and_grads
from ref_optim import RefOptim, clip_grad_norm, with_fp32_betas
from ref_schedule import lr_at

TOL = 1e-4
N_TRAIN, N_VAL, SIDE, CLASSES = 64, 32, 8, 10
HIDDEN = [32, 16]
GLOBAL, MICRO, STEPS = 16, 8, 3

WARMUP = {"lr_scaling": "linear", "warmup": {"steps": 3}}
CASES = {
    "sgd": ({"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 0.01}, WARMUP),
    "sgd_nesterov_clip": ({"type": "sgd", "lr": 0.05, "momentum": 0.8, "nesterov": True,
                           "weight_decay": 0.01, "clip_grad_norm": 0.5}, WARMUP),
    "adamw": ({"type": "adamw", "lr": 2e-3, "weight_decay": 0.1,
               "exclude_from_weight_decay": ["bias"]}, WARMUP),
    "adamw_clip": ({"type": "adamw", "lr": 2e-3, "betas": [0.8, 0.95], "weight_decay": 0.05,
                    "clip_grad_norm": 0.3}, WARMUP),
    "lars": ({"type": "lars", "lr": 1.0, "trust_coef": 0.01, "weight_decay": 5e-4}, WARMUP),
    "lamb": ({"type": "lamb", "lr": 0.01, "weight_decay": 0.01},
             {"lr_scaling": "sqrt", "decay": "cosine", "final_lr": 1e-3}),
}


def write_idx(path, array, magic, compress):
    head = struct.pack(">I", magic) + b"".join(struct.pack(">I", d) for d in array.shape)
    data = head + array.astype(np.uint8).tobytes()
    with (gzip.open if compress else open)(path, "wb") as f:
        f.write(data)


def make_dataset(tmp_path, rng):
    images = rng.integers(0, 256, (N_TRAIN + N_VAL, SIDE, SIDE), dtype=np.uint8)
    labels = rng.integers(0, CLASSES, N_TRAIN + N_VAL).astype(np.uint8)
    labels[5] = CLASSES - 1              # the class count is max label + 1
    files = {}
    for split, sl, gz in (("train", slice(0, N_TRAIN), False), ("val", slice(N_TRAIN, None), True)):
        suffix = ".gz" if gz else ""
        img = tmp_path / f"{split}-images-idx3-ubyte{suffix}"
        lab = tmp_path / f"{split}-labels-idx1-ubyte{suffix}"
        write_idx(img, images[sl], 0x00000803, gz)
        write_idx(lab, labels[sl], 0x00000801, gz)
        files[split] = {"images": str(img), "labels": str(lab)}
    return images, labels, files


def make_init(rng):
    dims = [SIDE * SIDE] + HIDDEN + [CLASSES]
    params = {}
    for i in range(1, len(dims)):
        params[f"fc{i}.weight"] = (rng.standard_normal((dims[i], dims[i - 1]))
                                   * np.sqrt(2.0 / dims[i - 1])).astype(np.float32)
        params[f"fc{i}.bias"] = (0.1 * rng.standard_normal(dims[i])).astype(np.float32)
    return params


def standardise(images, n_train):
    """data_idx.c's rule, from docs/spec.md and trainer/README: mean and
    (population) std over every pixel of the train split."""
    train = images[:n_train].astype(np.float64)
    mean, sd = train.mean(), train.std()
    return ((images.astype(np.float64) - mean) / sd).reshape(len(images), -1)


def reference_run(spec, init, x, y):
    """numpy: STEPS optimizer steps over consecutive global batches."""
    opt_cfg = spec["optimizer"]
    params = {k: v.astype(np.float64) for k, v in init.items()}
    opt = RefOptim(with_fp32_betas(opt_cfg))
    steps_per_epoch = N_TRAIN // GLOBAL
    trace = []
    for s in range(STEPS):
        lr = lr_at(spec, steps_per_epoch, STEPS, s)
        rows = slice(s * GLOBAL, (s + 1) * GLOBAL)      # "shuffle": false
        loss, grads = mlp_loss_and_grads(params, x[rows], y[rows], "relu")
        norm = clip_grad_norm(grads, opt_cfg.get("clip_grad_norm", 0.0))
        opt.step(params, grads, lr)
        trace.append({"train/loss": loss, "train/lr": lr, "train/grad_norm": norm})
    val_loss, _ = mlp_loss_and_grads(params, x[N_TRAIN:], y[N_TRAIN:], "relu")
    return params, opt, trace, val_loss


def rel_err(got, want):
    scale = np.max(np.abs(want))
    return np.max(np.abs(np.asarray(got, np.float64) - want)) / scale


@pytest.mark.parametrize("case", list(CASES))
def test_mlp_three_steps_match_numpy(larch_train, tmp_path, case):
    optimizer, schedule = CASES[case]
    rng = np.random.default_rng(2024)
    images, labels, files = make_dataset(tmp_path, rng)
    init = make_init(rng)
    safetensors_np.write(tmp_path / "init.safetensors", init)
    spec = {
        "name": f"numeric-{case}".replace("_", "-"),
        "model": {"type": "mlp", "hidden": HIDDEN, "activation": "relu"},
        "data": {"format": "idx", "train": files["train"], "val": files["val"], "shuffle": False},
        "batch": {"global": GLOBAL, "micro": MICRO, "reference": MICRO},
        "optimizer": optimizer,
        "schedule": schedule,
        "steps": STEPS,
        "log_every": 1,
        "seed": 5,
        "init": {"from": "init.safetensors"},
    }
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    job = tmp_path / "job"
    run = subprocess.run([str(larch_train), "--spec", "spec.json", "--job-dir", str(job),
                          "--threads", "2", "--quiet"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == 0, f"larch-train exited {run.returncode}:\n{run.stdout}\n{run.stderr}"

    tensors, meta = safetensors_np.read(job / "checkpoints" / "step-00000003.safetensors")
    assert (meta["step"], meta["t"], meta["optimizer"]) == ("3", "3", optimizer["type"])

    x = standardise(images, N_TRAIN)
    ref, opt, trace, val_loss = reference_run(spec, init, x, labels.astype(np.int64))

    states = {"m": opt.m} if optimizer["type"] in ("sgd", "lars") else {"m": opt.m, "v": opt.v}
    assert set(tensors) == {f"{kind}.{name}" for name in ref
                            for kind in ["param"] + [f"optim.{k}" for k in states]}
    errors = {}
    for name, want in ref.items():
        errors[name] = rel_err(tensors["param." + name], want)
        for key, state in states.items():
            errors[f"optim.{key}.{name}"] = rel_err(tensors[f"optim.{key}.{name}"], state[name])
        # the update is large next to the tolerance, so a wrong one shows
        moved = np.max(np.abs(want - init[name])) / np.max(np.abs(want))
        assert moved > 30 * TOL, f"{case}: {name} moves only {moved:.1e} of its scale"

    metrics = [json.loads(line) for line in (job / "metrics.jsonl").read_text().splitlines()]
    for s, want in enumerate(trace, start=1):
        for key, value in want.items():
            got = [m["value"] for m in metrics if m["step"] == s and m["name"] == key]
            assert len(got) == 1, f"{key} at step {s}: {got}"
            errors[f"{key}@{s}"] = abs(got[0] - value) / abs(value)
    result = json.loads((job / "result.json").read_text())
    assert result["status"] == "completed" and result["steps"] == STEPS
    errors["val/loss"] = abs(result["final"]["val/loss"] - val_loss) / val_loss

    if "clip_grad_norm" in optimizer:    # clipping must act for the case to test it
        assert min(t["train/grad_norm"] for t in trace) > optimizer["clip_grad_norm"]
    assert len({t["train/lr"] for t in trace}) == STEPS
    worst = max(errors, key=errors.get)
    assert errors[worst] <= TOL, (
        f"{case}: {worst} off by {errors[worst]:.2e} (tolerance {TOL:.0e}); "
        + ", ".join(f"{k} {e:.1e}" for k, e in errors.items()))
