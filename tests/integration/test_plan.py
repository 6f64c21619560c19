"""The memory preflight (trainer/spec/plan.h): `larch plan` prints what each rank
holds; the plan agrees with what larch-train reports and with the peak
resident memory the kernel measured for a real run (within 10%); larchd
answers 422 with the plan and the largest micro-batch that fits when a spec
cannot fit its node (resources.mem, or the machine) and takes it at that
micro-batch."""
import json
import os
import re
import subprocess

import numpy as np
import pytest
import requests

from datasets import write_tokens_u16
from larchd import BUILD, Larchd

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2
MIB = 1024 * 1024

# model memory dominates: 20 M parameters, AdamW (params, grads, m, v)
BIG_MLP = {"name": "big-mlp", "model": {"type": "mlp", "hidden": [4096, 4096]},
           "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
           "optimizer": {"type": "adamw", "lr": 0.001}, "steps": 3, "log_every": 1}


def larch(*args, input=None):
    exe = BUILD / "service" / "larch"
    return subprocess.run([str(exe), *map(str, args)], input=input, capture_output=True,
                          text=True, timeout=60)


def plan_json(tmp_path, spec, *args):
    path = tmp_path / f"{spec['name']}.json"
    path.write_text(json.dumps(spec))
    out = larch("plan", path, "--json", *args)
    assert out.returncode in (EXIT_OK, EXIT_REFUSED), out.stderr
    return json.loads(out.stdout), out.returncode


def text_corpus(tmp_path):
    path = tmp_path / "corpus.txt"
    path.write_bytes(bytes(range(256)) * 400)
    return path


def gpt_spec(tmp_path, micro, **extra):
    return {"name": "gpt-plan", "model": {"type": "gpt", "layers": 4, "heads": 4, "dim": 256,
                                          "seq": 256},
            "data": {"format": "text", "path": str(text_corpus(tmp_path))},
            "batch": {"global": micro, "micro": micro},
            "optimizer": {"type": "adamw", "lr": 3e-4}, "steps": 2, "log_every": 1, **extra}


def test_plan_table_and_json(tmp_path):
    path = tmp_path / "big.json"
    path.write_text(json.dumps(BIG_MLP))
    out = larch("plan", path)
    assert out.returncode == EXIT_OK, out.stderr
    n = 784 * 4096 + 4096 + 4096 * 4096 + 4096 + 4096 * 10 + 10
    assert f"{n} parameters, micro-batch 256, 1 rank, CPU" in out.stdout, out.stdout
    for item in ("params", "grads", "optimizer", "activations", "data", "host"):
        assert re.search(rf"^  {item} +[\d.]+", out.stdout, re.M), (item, out.stdout)
    p, rc = plan_json(tmp_path, BIG_MLP)
    assert rc == EXIT_OK
    assert p["params"] == n and p["items"]["params"] == 4 * n and p["items"]["grads"] == 4 * n
    assert p["items"]["optimizer"] == 8 * n                    # AdamW: m and v in fp32
    # the data set: 70,000 standardised images of 784 floats and their labels
    assert p["items"]["data"] >= 70000 * (784 * 4 + 4)
    assert p["host_bytes_per_rank"] == sum(p["items"].values())


def test_plan_follows_the_spec(tmp_path, monkeypatch):
    base, _ = plan_json(tmp_path, BIG_MLP)
    int8, _ = plan_json(tmp_path, dict(BIG_MLP, name="int8",
                                       optimizer={"type": "adamw", "lr": 1e-3,
                                                  "state_dtype": "int8"}))
    ratio = base["items"]["optimizer"] / int8["items"]["optimizer"]
    assert 3.9 < ratio <= 4.0, ratio
    sgd, _ = plan_json(tmp_path, dict(BIG_MLP, name="sgd0",
                                      optimizer={"type": "sgd", "lr": 0.1, "momentum": 0}))
    assert "optimizer" not in sgd["items"]
    zero, _ = plan_json(tmp_path, dict(BIG_MLP, name="zero", batch={"global": 256},
                                       parallel={"ranks": 2, "zero_stage": 1}))
    n = base["params"]
    assert zero["items"]["optimizer"] == 8 * ((n + 1) // 2)
    assert zero["items"]["grad_shard"] == 4 * ((n + 1) // 2)
    assert zero["ranks_per_node"] == 2
    assert zero["host_bytes_per_node"] == 2 * zero["host_bytes_per_rank"]
    none, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16))
    rec, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, offload={"activations": "recompute"}))
    assert rec["items"]["activations"] < none["items"]["activations"] / 2
    bf16, _ = plan_json(tmp_path, dict(BIG_MLP, name="bf16", precision={"compute": "bf16"}))
    assert bf16["items"]["master"] == 4 * n                    # fp32 master weights
    assert bf16["items"]["params"] == 4 * n                    # held in floats on the CPU
    gpu, _ = plan_json(tmp_path, dict(BIG_MLP, name="gpu", precision={"compute": "bf16"},
                                      resources={"gpus_per_node": 1}))
    # in floats on a GPU too (its 16-bit storage is emulated), and the GPU
    # model's host copies of the params and grads beside its gradient stage
    assert gpu["items"]["params"] == 4 * n and gpu["device_bytes_per_gpu"] > 0
    assert gpu["items"]["host_copy"] == 8 * n + 4 * min(n, 1 << 20)
    assert gpu["items"]["master"] == 4 * n and gpu["items"]["checkpoint"] == 4 * n + 8 * n
    # int8 state steps on the GPU too: master and state there, the state a
    # quarter of fp32's, and the checkpoint's copy of both on the host
    gi8, _ = plan_json(tmp_path, dict(BIG_MLP, name="gpu-int8", precision={"compute": "bf16"},
                                      resources={"gpus_per_node": 1},
                                      optimizer={"type": "adamw", "lr": 1e-3,
                                                 "state_dtype": "int8"}))
    q8 = int8["items"]["optimizer"]
    assert gi8["items"]["optimizer"] == q8
    assert gi8["device_bytes_per_gpu"] == gpu["device_bytes_per_gpu"] - 8 * n + q8
    assert gi8["items"]["checkpoint"] == 4 * n + q8
    # a 16-bit GPT on a GPU stores its activations in 2 bytes; on the GEMM
    # attention path (a head size other than 64) but for one fp32 [B, NH,
    # T, T] of attention scratch; the same on the CPU, and in fp32, as the
    # CPU layout's floats. What the plan counts follows from the spec alone:
    # larch-train's LARCH_CUDA_* environment changes nothing.
    gpu_gpt = dict(resources={"gpus_per_node": 1})
    g32, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, **gpu_gpt))
    g16_flash, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, precision={"compute": "bf16"},
                                                **gpu_gpt))
    for name, value in (("LARCH_CUDA_ATTENTION", "gemm"), ("LARCH_CUDA_ACT16", "0"),
                        ("LARCH_CUDA_FLASH_DQ", "atomic")):
        monkeypatch.setenv(name, value)
        same, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, precision={"compute": "bf16"},
                                               **gpu_gpt))
        monkeypatch.delenv(name)
        assert same["items"] == g16_flash["items"], name
    gemm_model = {"type": "gpt", "layers": 4, "heads": 8, "dim": 256, "seq": 256}
    none8, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, model=gemm_model))
    g16, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, model=gemm_model,
                                          precision={"compute": "bf16"}, **gpu_gpt))
    c16, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, precision={"compute": "bf16"}))
    att = 16 * 4 * 256 * 256
    assert g32["items"]["activations"] == none["items"]["activations"]
    assert c16["items"]["activations"] == none["items"]["activations"]
    assert g16["items"]["activations"] == none8["items"]["activations"] // 2 + 2 * (2 * att)
    # the fused attention, the default with head size 64: each of the 4
    # blocks keeps its rows' fp32 log-sum-exp in place of a 16-bit [T, T],
    # and there is no fp32 scratch; with the GEMM path's attention at 4
    # heads (what the 8-head model's [T, T] are, halved)
    lse = 4 * 16 * 4 * 256
    g16_4heads = none["items"]["activations"] // 2 + 2 * att
    assert g16_flash["items"]["activations"] == g16_4heads + 4 * (lse - 2 * att) - 4 * att
    # its backward adding dq atomically ("deterministic": false): one fp32
    # [B, T, C] of scratch more
    g16_dq, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, precision={
        "compute": "bf16", "deterministic": False}, **gpu_gpt))
    assert g16_dq["items"]["activations"] == \
        g16_flash["items"]["activations"] + 4 * 16 * 256 * 256
    # a 16-bit model on a GPU keeps a 16-bit copy of its params for the
    # GEMMs: none in fp32, nor with the params offloaded (they stream)
    assert gpu["items"]["params16"] == 2 * n
    assert g16["items"]["params16"] == 2 * g16["params"]       # vocabulary 256: no padding
    assert "params16" not in g32["items"] and "params16" not in c16["items"]
    streamed, _ = plan_json(tmp_path, gpt_spec(tmp_path, 16, precision={"compute": "bf16"},
                                               offload={"params": "cpu"}, **gpu_gpt))
    assert "params16" not in streamed["items"]
    # GPT-2's vocabulary: the token embedding's copy has its rows padded to
    # a multiple of 64 with zeros, as the logits' rows are
    write_tokens_u16(tmp_path / "tokens.bin", np.arange(4096) % 50257)
    wide = gpt_spec(tmp_path, 4, precision={"compute": "bf16"}, **gpu_gpt)
    wide["model"] = dict(wide["model"], vocab=50257)
    wide["data"] = {"format": "tokens_u16", "train": str(tmp_path / "tokens.bin")}
    g2, _ = plan_json(tmp_path, wide)
    assert g2["items"]["params16"] == 2 * (g2["params"] + (50304 - 50257) * 256), g2


def test_plan_limits_say_the_largest_micro_batch(tmp_path):
    spec = gpt_spec(tmp_path, 64)
    p, rc = plan_json(tmp_path, spec, "--host-mem", "0.5")
    assert rc == EXIT_REFUSED and not p["fits"] and 0 < p["largest_micro"] < 64, p
    smaller, rc = plan_json(tmp_path, gpt_spec(tmp_path, p["largest_micro"]), "--host-mem", "0.5")
    assert rc == EXIT_OK and smaller["fits"], smaller
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps(spec))
    out = larch("plan", path, "--host-mem", "0.5")
    assert out.returncode == EXIT_REFUSED
    assert f"the largest micro-batch that fits is {p['largest_micro']}" in out.stdout


def test_plan_refuses_bad_input(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(BIG_MLP, bogus=1)))
    out = larch("plan", bad)
    assert out.returncode == EXIT_USAGE and "bogus" in out.stderr, out.stderr
    bad.write_text("{not json")
    out = larch("plan", bad)
    assert out.returncode == EXIT_USAGE and "invalid JSON" in out.stderr
    missing = dict(BIG_MLP, data={"format": "idx", "train": {
        "images": str(tmp_path / "none-images.gz"), "labels": str(tmp_path / "none-labels.gz")}})
    bad.write_text(json.dumps(missing))
    out = larch("plan", bad)
    assert out.returncode == EXIT_USAGE and "none-images.gz" in out.stderr, out.stderr
    out = larch("plan", tmp_path / "big.json", "--host-mem", "lots")
    assert out.returncode == EXIT_USAGE


def test_larch_train_plans_as_the_cli_does(tmp_path):
    """larch-train --plan (for machines without the larch CLI: the GPU
    benchmarks' micro-batches) prints larch plan --json's object, limits and
    exit status included, and refuses what the CLI refuses."""
    exe = BUILD / "trainer" / "larch-train"
    spec = dict(gpt_spec(tmp_path, 64), resources={"gpus_per_node": 1})
    path = tmp_path / "gpt.json"
    path.write_text(json.dumps(spec))
    for limits in ([], ["--host-mem", "0.5"], ["--gpu-mem", "0.2"], ["--gpu-mem", "500"]):
        cli = larch("plan", path, "--json", *limits)
        own = subprocess.run([str(exe), "--plan", str(path), *limits], capture_output=True,
                             text=True, timeout=60)
        assert own.returncode == cli.returncode, (limits, own.stderr)
        assert json.loads(own.stdout) == json.loads(cli.stdout), limits
        if limits:
            assert "largest_micro" in json.loads(own.stdout)
    assert json.loads(own.stdout)["fits"] and own.returncode == EXIT_OK
    for args, text in ((["--plan", str(path), "--gpu-mem", "lots"], "--gpu-mem"),
                       (["--plan", str(path), "--host-mem", "0"], "--host-mem"),
                       (["--spec", str(path), "--gpu-mem", "8"], "go with --plan"),
                       (["--plan", str(tmp_path / "none.json")], "none.json")):
        out = subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=60)
        assert out.returncode == EXIT_USAGE and text in out.stderr, (args, out.stderr)
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(dict(spec, bogus=1)))
    out = subprocess.run([str(exe), "--plan", str(bad)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == EXIT_USAGE and "bogus" in out.stderr, out.stderr


@pytest.mark.parametrize("spec", ["mlp-adamw", "mlp-bf16-int8", "gpt-recompute",
                                  "gpt-bf16-offloads", "gpt-bf16-streamed"])
def test_measured_peak_is_within_10_percent_of_the_plan(tmp_path, larch_train, spec):
    """The kernel's high-water mark of a real run's resident memory against the
    plan's host total (the process's own code and libraries on top of it are
    the few MiB the 10% allows)."""
    s = {
        "mlp-adamw": BIG_MLP,
        "mlp-bf16-int8": dict(BIG_MLP, name="bf16-int8", precision={"compute": "bf16"},
                              optimizer={"type": "adamw", "lr": 1e-3, "state_dtype": "int8"}),
        "gpt-recompute": dict(gpt_spec(tmp_path, 32, offload={"activations": "recompute"}),
                              model={"type": "gpt", "layers": 8, "heads": 8, "dim": 512,
                                     "seq": 256}),
        # every offload: the optimizer works in the params' host copies (after
        # backward: the clipping needs every gradient)
        "gpt-bf16-offloads": dict(gpt_spec(tmp_path, 8, offload={
            "activations": "recompute", "params": "cpu", "optimizer": "cpu"}),
            precision={"compute": "bf16"},
            optimizer={"type": "adamw", "lr": 3e-4, "clip_grad_norm": 1.0},
            model={"type": "gpt", "layers": 8, "heads": 8, "dim": 512, "seq": 256}),
        # one micro-batch a step, no clipping: the update follows backward and
        # the blocks' gradients are not kept
        "gpt-bf16-streamed": dict(gpt_spec(tmp_path, 8, offload={
            "params": "cpu", "optimizer": "cpu"}),
            precision={"compute": "bf16"}, batch={"global": 8, "micro": 8},
            optimizer={"type": "adamw", "lr": 1e-3, "state_dtype": "int8"},
            model={"type": "gpt", "layers": 8, "heads": 8, "dim": 512, "seq": 256}),
    }[spec]
    p, _ = plan_json(tmp_path, s)
    path = tmp_path / "run.json"
    path.write_text(json.dumps(s))
    proc = subprocess.Popen([str(larch_train), "--spec", str(path), "--job-dir",
                             str(tmp_path / "job")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    stdout = proc.stdout.read().decode()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode()
    proc.stdout.close()
    proc.stderr.close()
    assert proc.returncode == 0, stderr
    peak = usage.ru_maxrss * 1024
    planned = p["host_bytes_per_rank"]
    print(f"{spec}: plan {planned / MIB:.1f} MiB, peak resident {peak / MIB:.1f} MiB "
          f"({100 * (peak - planned) / planned:+.1f}%)")
    # the trainer says the same at the end of its run
    said = re.search(r"^memory: peak resident ([\d.]+) MiB, planned ([\d.]+) MiB", stdout, re.M)
    assert said, stdout[-2000:]
    assert abs(float(said.group(2)) - planned / MIB) < 0.1
    assert abs(float(said.group(1)) - peak / MIB) <= 0.02 * peak / MIB
    assert abs(peak - planned) <= 0.10 * planned, \
        f"peak {peak / MIB:.1f} MiB vs plan {planned / MIB:.1f} MiB ({p['items']})"


@pytest.fixture
def server(tmp_path):
    d = Larchd(tmp_path).start()
    yield d
    d.stop()


def submit(server, spec):
    return requests.post(server.url + "/v1/jobs", json=spec, headers=server.auth(), timeout=30)


def test_larchd_refuses_a_spec_that_cannot_fit_with_the_plan(tmp_path, server):
    # resources.mem is the node's limit the job asks for: 512 MiB
    spec = gpt_spec(tmp_path, 64, resources={"mem": "512M"})
    r = submit(server, spec)
    assert r.status_code == 422, r.text
    e = r.json()["error"]
    assert e["code"] == "infeasible" and e["message"].startswith("memory: "), e
    assert "resources.mem gives 0.50 GiB" in e["message"], e["message"]
    best = e["detail"]["largest_micro"]
    assert 0 < best < 64 and f"the largest micro-batch that fits is {best}" in e["message"]
    plan = e["detail"]["plan"]
    assert plan["micro"] == 64 and plan["host_bytes_per_node"] > 512 * MIB
    assert e["detail"]["host_limit_bytes"] == 512 * MIB
    # nothing was stored
    jobs = requests.get(server.url + "/v1/jobs", headers=server.auth(), timeout=30).json()
    assert jobs["jobs"] == [], jobs
    # at the micro-batch the answer named, it fits and is taken
    r = submit(server, gpt_spec(tmp_path, best, resources={"mem": "512M"}))
    assert r.status_code == 201, r.text


def test_gpu_memory_per_partition(tmp_path):
    """gpu_memory = 80G,small=64M: a GPU job that needs ~300 MiB per GPU fits
    the default partition's GPUs and not those of partition small."""
    d = Larchd(tmp_path, args=["--gpu-memory", "80G,small=64M"]).start()
    try:
        gpu = dict(BIG_MLP, name="gpu-job", resources={"gpus_per_node": 1, "partition": "small"})
        r = submit(d, gpu)
        assert r.status_code == 422, r.text
        e = r.json()["error"]
        assert "per GPU" in e["message"] and "a GPU has 0.06 GiB" in e["message"], e
        assert e["detail"]["gpu_limit_bytes"] == 64 * MIB
        r = submit(d, dict(gpu, name="cpu-job", resources={"partition": "small"}))
        assert r.status_code == 201, r.text              # no GPUs asked: not held to it
        r = submit(d, dict(gpu, resources={"gpus_per_node": 1}))
        assert r.status_code == 201, r.text
        for j in requests.get(d.url + "/v1/jobs", headers=d.auth(), timeout=30).json()["jobs"]:
            requests.post(f"{d.url}/v1/jobs/{j['id']}/cancel", headers=d.auth(), timeout=30)
    finally:
        d.stop()


def test_larchd_refuses_what_no_node_of_this_machine_holds(tmp_path, server):
    huge = {"name": "huge", "model": {"type": "gpt", "layers": 48, "heads": 32, "dim": 8192,
                                      "seq": 1024},
            "data": {"format": "text", "path": str(text_corpus(tmp_path))},
            "batch": {"global": 8, "micro": 1}, "optimizer": {"type": "adamw", "lr": 1e-4},
            "steps": 1}
    r = submit(server, huge)
    assert r.status_code == 422, r.text
    e = r.json()["error"]
    assert "a node of the partition has" in e["message"], e["message"]
    assert "does not fit even at micro-batch 1" in e["message"]
    assert e["detail"]["largest_micro"] == 0
    # a model whose buffers would overflow any count: refused, no plan made
    absurd = dict(huge, name="absurd", model={"type": "gpt", "layers": 256, "heads": 1024,
                                              "dim": 65536, "seq": 65536},
                  batch={"global": 1 << 24, "micro": 1 << 24})
    r = submit(server, absurd)
    assert r.status_code == 422, r.text
    assert "far more than any machine has" in r.json()["error"]["message"], r.text
    path = tmp_path / "absurd.json"
    path.write_text(json.dumps(absurd))
    out = larch("plan", path)
    assert out.returncode == EXIT_REFUSED and "far more than any machine" in out.stderr, out
    # and a GPU job is held against gpu_memory (80G by default): 1.3B
    # parameters whose host side (the model's host copies) fits this machine,
    # and whose activations at micro-batch 64 fit no GPU
    gpu = dict(huge, name="huge-gpu", resources={"gpus_per_node": 1},
               model={"type": "gpt", "layers": 24, "heads": 16, "dim": 2048, "seq": 1024},
               batch={"global": 64, "micro": 64})
    r = submit(server, gpu)
    assert r.status_code == 422 and "per GPU" in r.json()["error"]["message"], r.text
