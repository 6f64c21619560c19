"""offload.optimizer "cpu" (trainer/opt_offload.h): master weights and
optimizer state on the host, gradients copied there bucket by bucket during
backward, the update on the host, the parameters back through two staging
buffers. It trains bit for bit what "none" trains: every checkpoint
(parameters and optimizer state) and every loss, gradient norm and loss
scale, for SGD, AdamW, LARS and LAMB, fp32, bf16 and fp16 (from a loss
scale that overflows, so that steps are skipped), int8 state, with
gradient clipping and accumulation, on one rank and on two (plain data
parallel and ZeRO-1, with buckets small enough to complete during
backward); a watchdog rollback rolls both back alike; a resumed offload run
ends where the straight one does; the memory report and the plan say what
lives on the host."""
import collections
import json
import os
import re
import shutil
import subprocess

import pytest

from datasets import read_safetensors, write_image_set
from jobdir import metrics
from larchd import BUILD
from mpi import mpi_env
from test_memory_report import memory_table
from test_watchdog import poisoned_set

STEPS = 8
MIB = 1024 * 1024
COMPARED = {"train/loss", "train/grad_norm", "train/loss_scale", "train/skipped_steps",
            "train/rollbacks", "val/loss", "val/accuracy"}

OPTIMIZERS = {
    "sgd": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
    "adamw": {"type": "adamw", "lr": 0.003, "weight_decay": 0.01},
    "lars": {"type": "lars", "lr": 1.0, "momentum": 0.9, "weight_decay": 5e-4,
             "trust_coef": 0.001},
    "lamb": {"type": "lamb", "lr": 0.005, "weight_decay": 0.01},
}

# fp16 from 2^20: the first steps' gradients overflow and are skipped
PRECISION = {"fp32": {"compute": "fp32"}, "bf16": {"compute": "bf16"},
             "fp16": {"compute": "fp16", "init_scale": 2 ** 20, "growth_interval": 3}}


@pytest.fixture
def image_data(tmp_path):
    return write_image_set(tmp_path, n_train=512, n_val=64, side=8)


def spec(data, mode, opt="adamw", dtype="fp32", ranks=1, zero=0, int8=False, **extra):
    """fc1.weight (3072 floats) spans two int8 blocks, and two ranks' ranges
    cut it; buckets of 0.001 MiB (262 floats) make a bucket of nearly every
    tensor; 64 = 32 x 2 accumulated (16 x 2 x 2 on two ranks)."""
    o = dict(OPTIMIZERS[opt], clip_grad_norm=0.5)
    if int8:
        o["state_dtype"] = "int8"
    s = {"name": "offload-opt", "model": {"type": "mlp", "hidden": [48, 40]}, "data": data,
         "batch": {"global": 64, "micro": 32 // ranks}, "optimizer": o,
         "precision": PRECISION[dtype], "offload": {"optimizer": mode},
         "parallel": {"ranks": ranks, "zero_stage": zero, "bucket_mb": 0.001},
         "steps": STEPS, "log_every": 2, "checkpoint_every": 2, "keep_checkpoints": 100,
         "seed": 5}
    s.update(extra)
    return s


def train(trainer, s, job, *args, mpirun=None):
    path = trainer.write_spec(s, name=f"{job.name}.json")
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(job), "--threads", "1"]
    cmd += list(args)
    if s["parallel"].get("ranks", 1) > 1:
        cmd = [mpirun, "-n", str(s["parallel"]["ranks"])] + cmd
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=mpi_env())
    assert out.returncode == 0, out.stderr[-3000:]
    return out


def checkpoints(job):
    return sorted(p.name for p in (job / "checkpoints").glob("step-*.safetensors"))


def assert_same_run(base, other, what):
    """Every checkpoint's tensors and metadata (but the spec's hash) and every
    compared metric, bit for bit."""
    names = checkpoints(base)
    assert names and names == checkpoints(other), what
    for name in names:
        ta, ma = read_safetensors(base / "checkpoints" / name)
        tb, mb = read_safetensors(other / "checkpoints" / name)
        assert sorted(ta) == sorted(tb), (what, name)
        for k in ta:
            assert ta[k].tobytes() == tb[k].tobytes(), f"{what}: {name}: {k} differs"
        ma.pop("spec_hash"), mb.pop("spec_hash")
        assert ma == mb, (what, name)
    series = lambda job: [(m["step"], m["name"], m["value"]) for m in metrics(job)
                          if m["name"] in COMPARED]
    assert series(base) == series(other), what


def by_name(job):
    out = collections.defaultdict(dict)
    for m in metrics(job):
        out[m["name"]][m["step"]] = m["value"]
    return out


def pair(trainer, tmp_path, tag, mpirun=None, **kw):
    jobs = {}
    for mode in ("none", "cpu"):
        jobs[mode] = tmp_path / f"{tag}-{mode}"
        out = train(trainer, spec(mode=mode, **kw), jobs[mode], mpirun=mpirun)
        if mode == "cpu":
            assert "offload.optimizer cpu" in out.stdout, out.stdout
    assert_same_run(jobs["none"], jobs["cpu"], tag)
    return jobs


def check_exercised(job, dtype):
    """The runs are worth comparing: clipping was on, and fp16 skipped steps
    and applied others."""
    m = by_name(job)
    assert max(m["train/grad_norm"].values()) > 0.5, "clipping never applied"
    if dtype == "fp16":
        assert 1 <= m["train/skipped_steps"][STEPS] < STEPS - 1, m["train/skipped_steps"]
        assert len(m["train/grad_norm"]) >= 2


@pytest.mark.parametrize("dtype", ["fp32", "bf16", "fp16"])
@pytest.mark.parametrize("opt", OPTIMIZERS)
def test_one_rank_trains_the_same_bits(trainer, image_data, tmp_path, opt, dtype):
    jobs = pair(trainer, tmp_path, f"{opt}-{dtype}", data=image_data, opt=opt, dtype=dtype)
    check_exercised(jobs["cpu"], dtype)


@pytest.mark.parametrize("opt", ["adamw", "lars"])
def test_int8_state_trains_the_same_bits(trainer, image_data, tmp_path, opt):
    jobs = pair(trainer, tmp_path, f"{opt}-int8", data=image_data, opt=opt, dtype="bf16",
                int8=True)
    tensors, meta = read_safetensors(jobs["cpu"] / "checkpoints" / f"step-{STEPS:08d}.safetensors")
    assert meta["optim_state"] == "int8-dynamic-2048"
    assert tensors["optim.m.fc1.weight"].dtype.name == "int8"


@pytest.mark.parametrize("layout,opt,dtype,int8", [
    ("plain", "adamw", "fp32", False),
    ("plain", "lars", "fp16", False),
    ("zero1", "sgd", "bf16", False),
    ("zero1", "adamw", "fp16", False),
    ("zero1", "lars", "fp32", False),
    ("zero1", "lamb", "bf16", False),
    ("zero1", "adamw", "bf16", True),
])
def test_two_ranks_train_the_same_bits(trainer, image_data, tmp_path, mpirun, layout, opt,
                                       dtype, int8):
    """Each rank offloads its range (with ZeRO-1 its shard, whose ends cut
    tensors and an int8 block); buckets are reduced and copied while
    backward goes on."""
    jobs = pair(trainer, tmp_path, f"{layout}-{opt}-{dtype}", mpirun=mpirun, data=image_data,
                opt=opt, dtype=dtype, ranks=2, zero=int(layout == "zero1"), int8=int8)
    check_exercised(jobs["cpu"], dtype)


@pytest.mark.parametrize("ranks", [1, 2])
def test_resume_is_bit_exact(trainer, image_data, tmp_path, mpirun, ranks):
    """A run resumed from its step-4 checkpoint ends where the straight one
    does (fp16: the loss scaler's state comes back too)."""
    kw = dict(data=image_data, opt="lamb" if ranks > 1 else "adamw", dtype="fp16", ranks=ranks,
              zero=int(ranks > 1))
    straight, resumed = tmp_path / "straight", tmp_path / "resumed"
    train(trainer, spec(mode="cpu", **kw), straight, mpirun=mpirun)
    (resumed / "checkpoints").mkdir(parents=True)
    shutil.copy(straight / "checkpoints" / "step-00000004.safetensors", resumed / "checkpoints")
    out = train(trainer, spec(mode="cpu", **kw), resumed, "--resume", mpirun=mpirun)
    assert "(step 4)" in out.stdout
    final = f"step-{STEPS:08d}.safetensors"
    ta, _ = read_safetensors(straight / "checkpoints" / final)
    tb, _ = read_safetensors(resumed / "checkpoints" / final)
    assert sorted(ta) == sorted(tb)
    for name in ta:
        assert ta[name].tobytes() == tb[name].tobytes(), f"{name} differs after resume"


def test_watchdog_rollback_restores_the_host_state(trainer, tmp_path):
    """A loss spike at step 12 rolls back to the step-10 checkpoint: the host's
    master weights and optimizer state come back from it as "none"'s do."""
    data = poisoned_set(tmp_path, bad_step=12)
    jobs = {}
    for mode in ("none", "cpu"):
        s = {"name": "spike", "model": {"type": "mlp", "hidden": [32]}, "data": data,
             "batch": {"global": 256}, "optimizer": {"type": "adamw", "lr": 0.003},
             "precision": {"compute": "bf16"}, "offload": {"optimizer": mode},
             "steps": 15, "log_every": 1, "checkpoint_every": 10, "seed": 1,
             "watchdog": {"max_rollbacks": 2, "spike_factor": 3, "window": 5},
             "parallel": {"bucket_mb": 0.01}}
        jobs[mode] = tmp_path / mode
        out = train(trainer, s, jobs[mode])
        assert "rolled back to step 10" in out.stdout, out.stdout
    assert by_name(jobs["cpu"])["train/rollbacks"] == {12: 1}
    assert_same_run(jobs["none"], jobs["cpu"], "rollback")


@pytest.mark.parametrize("zero", [0, 1])
def test_memory_report_says_what_lives_on_the_host(trainer, image_data, tmp_path, mpirun, zero):
    hidden = [512, 512]                       # about 0.3 M parameters: figures above 0.01 MiB
    got = {}
    for mode in ("none", "cpu"):
        s = spec(image_data, mode, "adamw", "bf16", ranks=1 + zero, zero=zero, steps=1,
                 model={"type": "mlp", "hidden": hidden},
                 parallel={"ranks": 1 + zero, "zero_stage": zero, "bucket_mb": 0.25})
        got[mode] = memory_table(train(trainer, s, tmp_path / f"{mode}", mpirun=mpirun).stdout)[1]
    none, cpu = got["none"], got["cpu"]
    # on the CPU backend every item is host memory (a GPU's split: the plan's
    # test below, through the same table)
    assert {v["where"] for v in cpu.values()} <= {"host", None}, cpu
    # the same sizes: master weights and optimizer state are the host's either way
    for item in ("params", "grads", "master", "optimizer", "activations"):
        assert cpu[item]["mib"] == none[item]["mib"], item
    for item in ("master", "optimizer"):
        assert "offload.optimizer cpu" in cpu[item]["note"], cpu[item]
        assert "offload.optimizer" not in none[item]["note"], none[item]
    if zero:
        assert cpu["grad_shard"]["mib"] == none["grad_shard"]["mib"] > 0
        assert "1/2 of" in cpu["master"]["note"] and "1/2 (ZeRO-1)" in cpu["optimizer"]["note"]
    # offload adds a copy of the range's gradients and two staging buffers of
    # bucket_mb, bf16 held in floats
    assert "grad_host" not in none and "param_stage" not in none
    assert cpu["grad_host"]["mib"] == cpu["master"]["mib"]
    assert cpu["param_stage"]["mib"] == 2 * 0.25 and cpu["param_stage"]["dtype"] == "bf16"
    added = cpu["grad_host"]["mib"] + cpu["param_stage"]["mib"]
    assert abs(cpu["total host"]["mib"] - none["total host"]["mib"] - added) <= 0.02, (none, cpu)


def larch(*args):
    return subprocess.run([str(BUILD / "service" / "larch"), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def plan_json(tmp_path, s):
    path = tmp_path / f"{s['name']}.json"
    path.write_text(json.dumps(s))
    out = larch("plan", path, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_metrics_say_where_the_time_after_backward_goes(trainer, image_data, tmp_path):
    # the offloaded run logs the parts of the time after its last backward
    # at every progress line: each some or none, together no more than it
    jobs = pair(trainer, tmp_path, "phases", data=image_data)
    m = by_name(jobs["cpu"])
    after = m["train/after_backward_s"]
    assert sorted(after) == list(range(2, STEPS + 1, 2)), after
    parts = [m[f"offload/{p}_s"] for p in ("grads", "norm", "update", "params")]
    for part in parts:
        assert part.keys() == after.keys(), part
        assert all(v >= 0 for v in part.values()), part
    assert all(v > 0 for v in m["offload/update_s"].values()), m["offload/update_s"]
    for step, total in after.items():
        assert sum(p[step] for p in parts) <= total * 1.001 + 1e-6, (step, total, parts)
    # and only that run
    assert not [k for k in by_name(jobs["none"]) if k.startswith("offload/")]


# 20 M parameters, AdamW: what offload moves dominates
BIG_MLP = {"name": "big-mlp", "model": {"type": "mlp", "hidden": [4096, 4096]},
           "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
           "optimizer": {"type": "adamw", "lr": 0.001}, "steps": 3, "log_every": 1}


def test_plan_moves_master_and_optimizer_to_the_host(tmp_path):
    # clipping: the update waits for every gradient, after backward
    clipped = {"type": "adamw", "lr": 0.001, "clip_grad_norm": 1.0}
    gpu = dict(BIG_MLP, precision={"compute": "bf16"}, resources={"gpus_per_node": 1},
               optimizer=clipped)
    none = plan_json(tmp_path, dict(gpu, name="none"))
    cpu = plan_json(tmp_path, dict(gpu, name="cpu", offload={"optimizer": "cpu"}))
    n = none["params"]
    items = cpu["items"]
    assert items["master"] == 4 * n and items["optimizer"] == 8 * n
    # on a GPU the update reads the model's host copy of the gradients and
    # writes the params' host copy in place: no copy of either, no staging
    assert "grad_host" not in items and "param_stage" not in items, items
    assert none["device_bytes_per_gpu"] - cpu["device_bytes_per_gpu"] == 12 * n
    # the 12n move to the host, where the resident run's checkpoint brought
    # them from the device anyway
    assert none["items"]["checkpoint"] == 12 * n and "checkpoint" not in items
    assert cpu["host_bytes_per_rank"] == none["host_bytes_per_rank"]
    # the CPU trainer keeps its copy of the gradients and two staging
    # buffers of the default 25 MiB bucket, so that CI runs the copies'
    # schedule; fp32 compute: the master weights are the host's too
    f32 = plan_json(tmp_path, dict(BIG_MLP, name="f32", offload={"optimizer": "cpu"},
                                   optimizer=clipped))["items"]
    assert f32["master"] == 4 * n and f32["grad_host"] == 4 * n
    assert f32["param_stage"] == 2 * 4 * (25 * MIB // 4)
    # no clipping, one micro-batch a step: the update follows backward and
    # reads the model's gradients itself, with no host copy or staging
    for where in (gpu, BIG_MLP):
        streamed = plan_json(tmp_path, dict(where, name="streamed", offload={"optimizer": "cpu"},
                                            optimizer=BIG_MLP["optimizer"]))["items"]
        assert "grad_host" not in streamed and "param_stage" not in streamed
        assert streamed["master"] == 4 * n and streamed["optimizer"] == 8 * n
    # ZeRO-1: the shard's; the reduce-scatter's shard is the host's (the
    # ranks reduce host gradients over MPI), and the update reads it there
    z = plan_json(tmp_path, dict(gpu, name="z", offload={"optimizer": "cpu"},
                                 parallel={"ranks": 2, "zero_stage": 1}))
    half = (n + 1) // 2
    assert z["items"]["grad_shard"] == 4 * half and "grad_host" not in z["items"]
    out = larch("plan", tmp_path / "z.json")
    _, table = memory_table(out.stdout)
    assert table["grad_shard"]["where"] == "host", out.stdout
    # the table says where each item lives: the GPU the model's, the host the
    # optimizer's
    for item, where in (("params", "device"), ("grads", "device"), ("activations", "device"),
                        ("master", "host"), ("optimizer", "host")):
        assert table[item]["where"] == where, (item, out.stdout)
    assert "offload.optimizer cpu" in table["optimizer"]["note"]
    assert table["grad_host"]["mib"] is None, out.stdout      # "none: ... in place"
    zc = plan_json(tmp_path, dict(BIG_MLP, name="zc", offload={"optimizer": "cpu"},
                                  optimizer=clipped, parallel={"ranks": 2, "zero_stage": 1}))
    assert zc["items"]["grad_host"] == 4 * half


def test_measured_peak_is_within_10_percent_of_the_plan(tmp_path, larch_train):
    s = dict(BIG_MLP, offload={"optimizer": "cpu"})
    planned = plan_json(tmp_path, s)["host_bytes_per_rank"]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(s))
    proc = subprocess.Popen([str(larch_train), "--spec", str(path), "--job-dir",
                             str(tmp_path / "job"), "--quiet"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    stderr = proc.stderr.read().decode()
    proc.stderr.close()
    assert os.waitstatus_to_exitcode(status) == 0, stderr
    peak = usage.ru_maxrss * 1024
    print(f"offload: plan {planned / MIB:.1f} MiB, peak resident {peak / MIB:.1f} MiB")
    assert abs(peak - planned) <= 0.10 * planned, (peak / MIB, planned / MIB)
