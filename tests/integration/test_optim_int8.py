"""int8 optimizer state (optimizer.state_dtype "int8"): every optimizer
trains Fashion-MNIST about as well as with fp32 state over a short run, with
a quarter of the state memory; the checkpoint holds codes and block scales
and a resume is bit-identical to a run that never stopped; ZeRO-1 over 2
and 3 ranks (whose ranges cut tensors inside a 2048-value block) ends where
one rank does and where plain data parallel does, with a consolidated
checkpoint of the same layout."""
import json
import re
import struct
import subprocess

import numpy as np
import pytest

from datasets import read_safetensors, write_image_set
from jobdir import result
from mpi import mpi_env
from test_resume import check_resume, mlp_spec

EXIT_OK, EXIT_FAILED = 0, 1
BLOCK = 2048

OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 5e-4},
    "adamw": {"type": "adamw", "lr": 0.002, "weight_decay": 0.01},
    "lars": {"type": "lars", "lr": 2.0, "momentum": 0.9, "weight_decay": 5e-4, "trust_coef": 0.001,
             "exclude_from_adaptation": [], "exclude_from_weight_decay": []},
    "lamb": {"type": "lamb", "lr": 0.005, "weight_decay": 0.01},
}


def fmnist_spec(optimizer, dtype, steps=150, hidden=(256,), **extra):
    s = {"name": "int8", "model": {"type": "mlp", "hidden": list(hidden)},
         "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
         "optimizer": dict(optimizer, state_dtype=dtype),
         "schedule": {"warmup": {"steps": 20}, "decay": "cosine"},
         "steps": steps, "log_every": 50, "seed": 11}
    s.update(extra)
    return s


def optimizer_line(stdout):
    return next(l for l in stdout.splitlines() if l.lstrip().startswith("optimizer "))


def dequantize(tensors, name, which):
    """The fp32 values of optim.<which>.<name> (int8 codes and scales), with
    the code tables rebuilt here as kernels/quant8_cpu.c builds them."""
    codes, scales = tensors[f"optim.{which}.{name}"].ravel(), tensors[f"optim.{which}_scale.{name}"]
    table = signed_table() if which == "m" else unsigned_table()
    idx = codes.astype(np.int64) % 256 if which == "m" else codes.astype(np.int64)
    return table[idx] * np.repeat(scales, BLOCK)[:codes.size]


def dynamic(first, shift):
    out = []
    for i in range(first, 7):
        count = 2 ** (i + shift)
        b = 0.1 + 0.9 * np.arange(count + 1) / count
        out += list((b[:-1] + b[1:]) / 2 / 10.0 ** (6 - i))
    return np.array(out)


def signed_table():
    mag = np.concatenate([[0.0], dynamic(1, 0), [1.0]]).astype(np.float32)
    t = np.zeros(256, np.float32)
    t[:128] = mag
    t[129:] = -mag[1:][::-1]
    t[128] = -1
    return t


def unsigned_table():
    return np.concatenate([[0.0], dynamic(0, 1), [1.0]]).astype(np.float32)


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_int8_state_trains_like_fp32_in_a_quarter_of_the_memory(trainer, tmp_path, opt):
    out = {}
    for dtype in ("fp32", "int8"):
        job = tmp_path / dtype
        out[dtype] = trainer.run(fmnist_spec(OPTIMIZERS[opt], dtype), job, "--threads", "2")
        assert out[dtype].returncode == EXIT_OK, out[dtype].stderr
    acc = {d: result(tmp_path / d)["final"]["val/accuracy"] for d in out}
    assert acc["fp32"] > 0.75, acc
    assert abs(acc["int8"] - acc["fp32"]) <= 0.01, acc

    # the memory report: int8 codes and a scale per block, about 1/4 of fp32
    f32, i8 = optimizer_line(out["fp32"].stdout), optimizer_line(out["int8"].stdout)
    assert " fp32 " in f32 and " int8 " in i8, (f32, i8)
    ratio = float(re.search(r"1/([\d.]+) of fp32", i8).group(1))
    assert 3.95 <= ratio <= 4.0, i8
    mib = [float(re.search(r"([\d.]+) MiB", l).group(1)) for l in (f32, i8)]
    assert abs(mib[0] / ratio - mib[1]) <= 0.01, (f32, i8)

    # the checkpoint: codes in the parameters' shapes, a scale per block
    tensors, meta = read_safetensors(tmp_path / "int8" / "checkpoints" / "step-00000150.safetensors")
    assert meta["optim_state"] == "int8-dynamic-2048"
    moments = ("m", "v") if opt in ("adamw", "lamb") else ("m",)
    fp32_state, _ = read_safetensors(tmp_path / "fp32" / "checkpoints" / "step-00000150.safetensors")
    for name in [k[len("param."):] for k in tensors if k.startswith("param.")]:
        p = tensors["param." + name]
        for which in moments:
            codes = tensors[f"optim.{which}.{name}"]
            assert codes.dtype == (np.int8 if which == "m" else np.uint8) and codes.shape == p.shape
            scales = tensors[f"optim.{which}_scale.{name}"]
            assert scales.dtype == np.float32 and scales.shape == (-(-p.size // BLOCK),)
            assert codes.min() >= (-127 if which == "m" else 0)
            # each block's largest code is the scale itself (absmax), unless all 0
            full = np.zeros(scales.size * BLOCK, np.int64)
            full[:codes.size] = np.abs(codes.ravel().astype(np.int64))
            top = full.reshape(-1, BLOCK).max(axis=1)
            assert np.all((top == (127 if which == "m" else 255)) | (scales == 0)), name
            # the state is that of a run like the fp32 one: the same order of size
            x, ref = dequantize(tensors, name, which), fp32_state[f"optim.{which}.{name}"].ravel()
            assert 0.3 < np.linalg.norm(x) / np.linalg.norm(ref) < 3, (name, which)


@pytest.mark.parametrize("opt", ["adamw", "lars"])
def test_int8_resume_is_bit_exact(trainer, tmp_path, opt):
    """Stopped by SIGTERM and resumed, the run ends with the same bits
    (parameters, codes and scales) as one that never stopped."""
    data = write_image_set(tmp_path, n_train=2560, n_val=256, side=28)
    optimizer = dict(OPTIMIZERS[opt], state_dtype="int8")
    check_resume(trainer, tmp_path, mlp_spec(data, optimizer), steps=48)


def forge_optim_state(path, code):
    """Rewrites the checkpoint's metadata "optim_state" as code, the header
    padded with spaces to its old length (the tensors' offsets stay)."""
    buf = path.read_bytes()
    n, = struct.unpack("<Q", buf[:8])
    header = json.loads(buf[8:8 + n])
    header["__metadata__"]["optim_state"] = code
    text = json.dumps(header, separators=(",", ":")).encode()
    assert len(text) <= n
    path.write_bytes(buf[:8] + text + b" " * (n - len(text)) + buf[8 + n:])


def test_a_checkpoint_of_another_code_map_is_refused(trainer, tmp_path):
    s = fmnist_spec(OPTIMIZERS["adamw"], "int8", steps=5, hidden=(32,), schedule={})
    job = tmp_path / "job"
    assert trainer.run(s, job).returncode == EXIT_OK
    ckpt = job / "checkpoints" / "step-00000005.safetensors"
    assert read_safetensors(ckpt)[1]["optim_state"] == "int8-dynamic-2048"
    forge_optim_state(ckpt, "int8-linear-2048")
    assert read_safetensors(ckpt)[1]["optim_state"] == "int8-linear-2048"
    out = trainer.run(s, job)
    assert out.returncode == EXIT_FAILED
    assert 'optimizer state written as "int8-linear-2048", this run keeps "int8-dynamic-2048"' \
        in out.stderr, out.stderr


def run_ranks(trainer, mpirun, s, job):
    path = trainer.write_spec(s, name=f"{job.name}.json")
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(job), "--threads", "1"]
    ranks = s["parallel"]["ranks"]
    if ranks > 1:
        cmd = [mpirun, "-n", str(ranks)] + cmd
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=mpi_env())


@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_int8_zero1_matches_one_rank_and_plain_data_parallel(trainer, mpirun, tmp_path, opt):
    """20 steps of a 784-64-10 MLP, whose fc1.weight (50176 values, 25
    blocks) the 2- and 3-rank ranges cut inside a block. Against one rank:
    the gradients are summed in another order, and a state value that lands
    that close to a rounding boundary of the code takes the neighbouring
    code; under Adam's normalisation such an element moves by a good part
    of a step: per tensor within 2% (L2) and 10% of the largest weight at
    worst (measured: 0.6% and 2.7% with AdamW, 0.3% at worst otherwise),
    where fp32 state stays within 2e-4. Against plain data parallel (each
    rank the whole state, no block cut), the same sums: the ranks agree on
    the cut blocks' scales, so the state and parameters are those of one
    whole buffer (they come out identical)."""
    def zspec(ranks, zero):
        return fmnist_spec(OPTIMIZERS[opt], "int8", steps=20, hidden=(64,), batch={"global": 384},
                           parallel={"ranks": ranks, "zero_stage": zero})
    runs = {"one": zspec(1, 0), "plain2": zspec(2, 0), "zero2": zspec(2, 1),
            "plain3": zspec(3, 0), "zero3": zspec(3, 1)}
    for name, s in runs.items():
        out = run_ranks(trainer, mpirun, s, tmp_path / name)
        assert out.returncode == EXIT_OK, f"{name}: {out.stderr[-3000:]}"
        if name == "zero3":
            line = optimizer_line(out.stdout)
            assert " int8 " in line and "sharded" in line, line
    ckpt = {name: read_safetensors(tmp_path / name / "checkpoints" / "step-00000020.safetensors")[0]
            for name in runs}
    base = ckpt["one"]
    for name, t in ckpt.items():
        assert t.keys() == base.keys(), name
        assert all(t[k].dtype == base[k].dtype and t[k].shape == base[k].shape for k in t), name
        for k in (k for k in base if k.startswith("param.")):
            diff = t[k] - base[k]
            assert np.linalg.norm(diff) <= 2e-2 * np.linalg.norm(base[k]), (name, k)
            assert float(np.abs(diff).max()) <= 0.1 * float(np.abs(base[k]).max()), (name, k)
    for ranks in ("2", "3"):
        plain, zero = ckpt["plain" + ranks], ckpt["zero" + ranks]
        for k in plain:
            if k.startswith("param."):
                scale = float(np.abs(plain[k]).max())
                assert float(np.abs(zero[k] - plain[k]).max()) <= 1e-6 * scale, (ranks, k)
            elif k.startswith(("optim.m.", "optim.v.")):
                # codes: at most a step apart where a last bit of a norm moved one
                diff = np.abs(zero[k].astype(np.int64) - plain[k].astype(np.int64))
                assert diff.max() <= 1 and np.mean(diff) < 1e-3, (ranks, k, diff.max())
