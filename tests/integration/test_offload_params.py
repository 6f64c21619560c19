"""offload.params "cpu" (trainer/model.h, trainer/param_offload.h): the
parameters live in host memory, each block's weights are staged for its
compute and its gradients copied out as its backward ends. It trains bit for
bit what "none" trains, for gpt and the mlp, in fp32 and bf16, alone and with
offload.activations "recompute" and "cpu", with gradient accumulation
(fp16 too), on two ranks with and without ZeRO-1 (gradient buckets started
from the copied-out gradients while backward goes on), and across a resume;
the start-up report and `larch plan` show the smaller working memory and the
host copies."""
import json
import subprocess

import pytest

from datasets import write_image_set
from larchd import BUILD
from test_memory_report import memory_table
from test_offload_activations import (assert_resumes_bit_exactly, assert_same_run, gpt_spec,
                                      mlp_spec, train)

# (params, activations): every combination against "none", "none"
COMBOS = [("cpu", "none"), ("cpu", "recompute"), ("cpu", "cpu")]
MIB = 1024 * 1024


def with_offload(spec, params, activations):
    spec["offload"] = {"params": params, "activations": activations}
    return spec


def make_spec(model, image_data, params, activations, dtype="fp32", **extra):
    if model == "gpt":
        s = gpt_spec(activations, dtype, **extra)
    else:
        s = mlp_spec(image_data, activations, dtype, activation=model.split("-")[1], **extra)
    return with_offload(s, params, activations)


@pytest.fixture
def image_data(tmp_path):
    return write_image_set(tmp_path, n_train=512, n_val=64, side=8)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize("model", ["gpt", "mlp-gelu", "mlp-relu"])
def test_params_cpu_trains_the_same_bits(trainer, image_data, tmp_path, model, dtype):
    """batch 16 = micro 8 x 2 (gpt), 64 = 32 x 2 (mlp): every step accumulates."""
    base = tmp_path / "none"
    train(trainer, make_spec(model, image_data, "none", "none", dtype), base)
    for params, act in COMBOS:
        job = tmp_path / f"{params}-{act}"
        out = train(trainer, make_spec(model, image_data, params, act, dtype), job)
        assert "offload.params cpu" in out.stdout
        assert_same_run(base, job, f"{model} {dtype} params {params} activations {act}")


@pytest.mark.parametrize("micro,dtype", [(16, "fp32"), (4, "fp32"), (4, "bf16"), (2, "fp16")])
def test_accumulation_adds_into_the_host_gradients(trainer, tmp_path, micro, dtype):
    """Accumulating 1, 4 and 8 micro-batches per step: the first one's staged
    gradients start from zero, the later ones from the host's sum so far;
    fp16 with its dynamic loss scale."""
    extra = {"batch": {"global": 16, "micro": micro}}
    base, job = tmp_path / "none", tmp_path / "cpu"
    train(trainer, with_offload(gpt_spec("none", dtype, **extra), "none", "none"), base)
    train(trainer, with_offload(gpt_spec("none", dtype, **extra), "cpu", "none"), job)
    assert_same_run(base, job, f"micro {micro} {dtype}")


@pytest.mark.parametrize("model,dtype,zero", [("gpt", "fp32", 1), ("gpt", "bf16", 1),
                                              ("mlp-gelu", "fp32", 1), ("gpt", "fp32", 0)])
def test_two_ranks_train_the_same_bits(trainer, image_data, tmp_path, mpirun, model, dtype, zero):
    """Small buckets: many reductions start during backward, each once the
    copies of all its parameters' gradients to the host were waited for, in
    the same order as without offload (the ranks must agree on it). Without
    ZeRO the buckets are allreduced in place in the host gradients."""
    parallel = {"ranks": 2, "zero_stage": zero, "bucket_mb": 0.01}
    base = tmp_path / "none"
    train(trainer, make_spec(model, image_data, "none", "none", dtype, parallel=parallel), base,
          mpirun=mpirun)
    for params, act in [("cpu", "none"), ("cpu", "cpu")]:
        job = tmp_path / f"{params}-{act}"
        out = train(trainer, make_spec(model, image_data, params, act, dtype, parallel=parallel),
                    job, mpirun=mpirun)
        assert "buckets" in out.stdout and ("ZeRO-1" in out.stdout) == bool(zero)
        assert_same_run(base, job, f"2 ranks zero {zero} {model} {dtype} {params} {act}")


def test_resumes_bit_exactly(trainer, tmp_path):
    """A params-cpu run resumed from its step-2 checkpoint ends where the
    straight one does, and both where "none" does."""
    s = with_offload(gpt_spec("recompute", "bf16", checkpoint_every=2), "cpu", "recompute")
    plain = with_offload(gpt_spec("none", "bf16", checkpoint_every=2), "none", "none")
    assert_resumes_bit_exactly(trainer, tmp_path, s, plain, "params cpu")


@pytest.mark.parametrize("dtype,state", [("fp32", "fp32"), ("bf16", "fp32"), ("bf16", "int8")])
def test_optimizer_offload_works_in_place(trainer, tmp_path, dtype, state):
    """offload.optimizer "cpu" beside offload.params "cpu": the update reads
    the gradients and writes the parameters in the parameters' host copies
    (no host gradients or staging of its own; in fp32 the params are the
    master weights), and the run is still bit for bit the one without either
    offload, across a resume too."""
    opt = {"type": "adamw", "lr": 0.003, "clip_grad_norm": 1.0, "state_dtype": state}
    both = with_offload(gpt_spec("none", dtype, optimizer=opt, checkpoint_every=2), "cpu", "none")
    both["offload"]["optimizer"] = "cpu"
    plain = with_offload(gpt_spec("none", dtype, optimizer=opt, checkpoint_every=2), "none",
                         "none")
    assert_resumes_bit_exactly(trainer, tmp_path, both, plain, f"{dtype} {state} both offloads")
    out = train(trainer, both, tmp_path / "report")
    _, table = memory_table(out.stdout)
    assert table["grad_host"] == {"mib": None, "where": None, "dtype": None, "note":
                                  "none: the update reads and writes the params' host copies "
                                  "in place"}, out.stdout
    assert "param_stage" not in table, out.stdout
    if dtype == "fp32":
        assert table["master"]["note"] == "none: the fp32 params are the master weights"
    else:
        assert table["master"]["mib"] > 0 and table["master"]["where"] == "host", out.stdout


def test_optimizer_offload_in_place_on_two_ranks(trainer, tmp_path, mpirun):
    """ZeRO-1: each rank updates its shard of the params' host copies, the
    gradients read from the reduce-scatter's shard in place."""
    parallel = {"ranks": 2, "zero_stage": 1, "bucket_mb": 0.01}
    base, job = tmp_path / "none", tmp_path / "both"
    train(trainer, with_offload(gpt_spec("none", "bf16", parallel=parallel), "none", "none"),
          base, mpirun=mpirun)
    both = with_offload(gpt_spec("none", "bf16", parallel=parallel), "cpu", "none")
    both["offload"]["optimizer"] = "cpu"
    out = train(trainer, both, job, mpirun=mpirun)
    assert "ZeRO-1" in out.stdout and "in place" in out.stdout
    assert_same_run(base, job, "2 ranks, ZeRO-1, both offloads")


STREAMED_OPTIMIZERS = {
    "adamw": {"type": "adamw", "lr": 0.003, "weight_decay": 0.1},
    "sgd": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "nesterov": True},
    "lars": {"type": "lars", "lr": 0.5, "weight_decay": 1e-4},
    "lamb": {"type": "lamb", "lr": 0.003, "weight_decay": 0.01},
}


def streamed_specs(dtype, optimizer, state="fp32", params="cpu", **extra):
    """(offload.optimizer "cpu" with offload.params, no offload): one rank,
    one micro-batch a step, no clipping, fp32 or bf16: the update follows
    backward."""
    opt = dict(STREAMED_OPTIMIZERS[optimizer], state_dtype=state)
    specs = []
    for where in ("cpu", "none"):
        s = with_offload(gpt_spec("none", dtype, optimizer=opt, batch={"global": 8, "micro": 8},
                                  **extra), params if where == "cpu" else "none", "none")
        s["offload"]["optimizer"] = where
        specs.append(s)
    return specs


@pytest.mark.parametrize("dtype,optimizer,state,params", [
    ("fp32", "adamw", "fp32", "cpu"), ("bf16", "adamw", "fp32", "cpu"),
    ("bf16", "adamw", "int8", "cpu"), ("fp32", "sgd", "fp32", "cpu"),
    ("bf16", "lars", "fp32", "cpu"), ("fp32", "lamb", "int8", "cpu"),
    ("fp32", "adamw", "fp32", "none"), ("bf16", "lamb", "int8", "none")])
def test_streamed_update_trains_the_same_bits(trainer, tmp_path, dtype, optimizer, state,
                                              params):
    """Each tensor updated as backward finishes it, with offload.params its
    gradient read from the parameter offload's window (the blocks' host
    gradients are not kept: a touch of them would fault), without it from
    the model's gradients: the parameters, optimizer state and losses of a
    run without offload, bit for bit, and its gradient norms."""
    both, plain = streamed_specs(dtype, optimizer, state, params)
    base, job = tmp_path / "none", tmp_path / "streamed"
    train(trainer, plain, base)
    out = train(trainer, both, job)
    assert "the update follows backward" in out.stdout, out.stdout
    # its gradient norm is summed tensor by tensor: the last bits differ
    assert_same_run(base, job, f"streamed {dtype} {optimizer} {state} params {params}",
                    grad_norm_rel=1e-6)


def test_streamed_update_resumes_bit_exactly(trainer, tmp_path):
    both, plain = streamed_specs("bf16", "adamw", "int8", checkpoint_every=2)
    assert_resumes_bit_exactly(trainer, tmp_path, both, plain, "the streamed update")


@pytest.mark.parametrize("why,extra", [
    ("accumulation", {"batch": {"global": 16, "micro": 8}}),
    ("clipping", {"optimizer": {"type": "adamw", "lr": 0.003, "clip_grad_norm": 1.0}}),
    ("fp16", {"precision": {"compute": "fp16"}})])
def test_what_keeps_the_update_after_backward(trainer, tmp_path, why, extra):
    """A step whose update needs every gradient first (a sum over
    micro-batches, the global norm, fp16's overflow check) keeps the host
    gradients and steps after backward, in place."""
    both, _ = streamed_specs("fp32", "adamw")
    both.update(extra)
    out = train(trainer, both, tmp_path / why)
    assert "the update follows backward" not in out.stdout
    assert "in place" in out.stdout


def gpt_floats(dim, seq, vocab=256):
    """(resident, one block) floats of model_gpt.c's table."""
    resident = vocab * dim + seq * dim + 2 * dim
    block = 12 * dim * dim + 13 * dim
    return resident, block


def test_memory_report_shows_the_staging_and_the_host_copies(trainer, tmp_path):
    got = {}
    for layers in (4, 8):
        for params in ("none", "cpu"):
            s = with_offload(gpt_spec("none", layers=layers, steps=1), params, "none")
            s["model"].update(dim=64, seq=64, heads=4)
            out = train(trainer, s, tmp_path / f"{params}-{layers}")
            got[params, layers] = memory_table(out.stdout)[1]
    for layers in (4, 8):
        resident, block = gpt_floats(64, 64)
        n = resident + layers * block
        none, cpu = got["none", layers], got["cpu", layers]
        assert none["params"]["mib"] == pytest.approx(4 * n / MIB, abs=0.006)
        assert "param_offload" not in none
        # the working copies: two blocks' staging, whatever the depth (on a
        # GPU the resident tensors too; on the CPU those are used in place
        # in the host copies)
        for item in ("params", "grads"):
            assert cpu[item]["mib"] == pytest.approx(4 * 2 * block / MIB, abs=0.006), cpu
            assert cpu[item]["note"].startswith("offload.params cpu: two blocks' staging of "
                                                f"{none['params']['mib']:.2f} MiB"), cpu[item]
        # the host: all of both (clipping: the update waits for every gradient)
        assert cpu["param_offload"]["mib"] == pytest.approx(
            none["params"]["mib"] + none["grads"]["mib"], abs=0.011), cpu
        assert cpu["param_offload"]["where"] == "host"
    assert got["cpu", 8]["params"]["mib"] == got["cpu", 4]["params"]["mib"]


def larch_plan(tmp_path, spec):
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    out = subprocess.run([str(BUILD / "service" / "larch"), "plan", str(path), "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode in (0, 1), out.stderr
    return json.loads(out.stdout)


def small_plan(tmp_path, spec, name, gpus, dim, seq):
    spec["name"] = name
    spec["model"].update(dim=dim, seq=seq, heads=4)
    spec["resources"] = {"gpus_per_node": gpus}
    return larch_plan(tmp_path, spec)


@pytest.mark.parametrize("gpus", [0, 1])
def test_plan_of_the_streamed_update_keeps_no_block_gradients(tmp_path, gpus):
    layers, dim, seq = 8, 64, 64
    resident, block = gpt_floats(dim, seq)
    n = resident + layers * block
    plans = {}
    for name, clip in (("streamed", 0), ("after", 1.0)):
        s, _ = streamed_specs("fp32", "adamw", "int8", layers=layers)
        s["optimizer"]["clip_grad_norm"] = clip
        plans[name] = small_plan(tmp_path, s, f"plan-{name}-{gpus}", gpus, dim, seq)["items"]
    # the host's params and, of the gradients, the resident tensors' and two
    # windows of a block, against all of them
    assert plans["after"]["param_offload"] == 4 * 2 * n
    assert plans["streamed"]["param_offload"] == 4 * (n + resident + 2 * block)
    assert "master" not in plans["streamed"] and "grad_host" not in plans["streamed"]


@pytest.mark.parametrize("gpus", [0, 1])
def test_plan_moves_the_params_and_grads_to_the_host(tmp_path, gpus):
    layers, dim, seq = 8, 64, 64
    resident, block = gpt_floats(dim, seq)
    n = resident + layers * block
    plans = {}
    for params in ("none", "cpu"):
        s = with_offload(gpt_spec("none", "bf16", layers=layers), params, "none")
        plans[params] = small_plan(tmp_path, s, f"plan-{params}-{gpus}", gpus, dim, seq)
    none, cpu = plans["none"]["items"], plans["cpu"]["items"]
    eb = 4                             # bf16 in floats, on a GPU too so far
    assert plans["cpu"]["params"] == n and none["params"] == eb * n
    assert "param_offload" not in none
    assert cpu["param_offload"] == eb * 2 * n
    # a GPU holds the resident tensors beside the staging; the CPU uses them in place
    held = 2 * block + (resident if gpus else 0)
    assert cpu["params"] == eb * held and cpu["grads"] == eb * held
    if gpus:
        # the offloaded run steps on the host (train.c): its optimizer state
        # leaves the device, and its master weights are the host copies (the
        # GPU rounds them as it reads them: no second fp32 copy)
        assert "master" not in cpu
        moved = none["optimizer"]
        drop = plans["none"]["device_bytes_per_gpu"] - plans["cpu"]["device_bytes_per_gpu"]
        # and the 16-bit copy of the params its GEMMs read (offloaded, the
        # blocks stream through slots and are converted there)
        assert none["params16"] == 2 * n and "params16" not in cpu
        assert drop == 2 * eb * (n - held) + none["master"] + moved + none["params16"]
        # the host copies a GPU model keeps anyway are the offload's store,
        # beside a gradient stage of the resident tensors
        assert none["host_copy"] == eb * 2 * n + 4 * min(n, 1 << 20)
        assert cpu["host_copy"] == 4 * min(held, 1 << 20)
        assert plans["cpu"]["host_bytes_per_rank"] - plans["none"]["host_bytes_per_rank"] == \
            eb * 2 * n + moved + cpu["host_copy"] - none["host_copy"] - none["checkpoint"]
    else:
        # params and grads: two blocks' staging each beside the host copies
        assert plans["cpu"]["host_bytes_per_rank"] - plans["none"]["host_bytes_per_rank"] == \
            eb * 2 * held
