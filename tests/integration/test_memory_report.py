"""The memory report in larch-train's header is the memory plan
(trainer/spec/plan.h): the table the run prints is the one `larch plan`
prints for the same spec, line for line, and its MiB are `larch plan
--json`'s bytes, item by item, with the same totals; a run on the CPU of a
spec that asks for GPUs reports the CPU's plan. memory_table() parses the
table for the other tests of the report."""
import json
import re
import subprocess

import pytest

from datasets import write_image_set
from larchd import BUILD
from mpi import mpi_env

MIB = 1024 * 1024
ROW = re.compile(r"^  (\S+) +([\d.]+) MiB  (host|device) +(\S+)(?:  +(.*))?$")
TOTAL = re.compile(r"^  (host|device|node) +([\d.]+) MiB  ((?:host )?total.*)$")
ABSENT = re.compile(r"^  (\S+) +-  +(none: .*)$")


def memory_table(stdout):
    """The report: (its header line, {item: {"mib", "where", "dtype",
    "note"}}), "mib" None for an item said to be absent ("none: why" in
    "note"); the totals as "total host", "total device", "total node"."""
    lines = stdout.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("memory plan per rank: "))
    table = {}
    for line in lines[start + 2:]:
        if not line.startswith("  "):
            break
        m = ABSENT.match(line)
        if m:
            table[m.group(1)] = {"mib": None, "where": None, "dtype": None, "note": m.group(2)}
            continue
        m = TOTAL.match(line)
        if m:
            table[f"total {m.group(1)}"] = {"mib": float(m.group(2)), "where": None,
                                            "dtype": None, "note": m.group(3)}
            continue
        m = ROW.match(line)
        assert m, line
        name, mib, where, dtype, note = m.groups()
        table[name] = {"mib": float(mib), "where": where, "dtype": dtype, "note": note or ""}
    return lines[start], table


def report_lines(stdout):
    """The report's lines as printed."""
    lines = stdout.splitlines()
    start = next(i for i, l in enumerate(lines) if l.startswith("memory plan per rank: "))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")),
               len(lines))
    return lines[start:end]


def larch_plan(path, *args):
    out = subprocess.run([str(BUILD / "service" / "larch"), "plan", str(path), *args],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


@pytest.fixture(scope="module")
def image_data(tmp_path_factory):
    return write_image_set(tmp_path_factory.mktemp("images"), n_train=256, n_val=64, side=8)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    path = tmp_path_factory.mktemp("text") / "corpus.txt"
    path.write_bytes(bytes(range(256)) * 64)
    return path


def gpt(corpus, **extra):
    return {"name": "report-gpt", "model": {"type": "gpt", "layers": 2, "heads": 2, "dim": 32,
                                            "seq": 16},
            "data": {"format": "text", "path": str(corpus)}, "batch": {"global": 8},
            "optimizer": {"type": "adamw", "lr": 1e-3}, "steps": 1, "eval_every": 0, **extra}


def mlp(data, **extra):
    return {"name": "report-mlp", "model": {"type": "mlp", "hidden": [64]}, "data": data,
            "batch": {"global": 32}, "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9},
            "steps": 1, "eval_every": 0, **extra}


CASES = {
    # idx data, SGD's one state
    "mlp": lambda d, c: mlp(d),
    # 16 bits held in floats, int8 state, both offloads that keep the params
    "gpt-bf16-offload": lambda d, c: gpt(
        c, precision={"compute": "bf16"},
        optimizer={"type": "adamw", "lr": 1e-3, "state_dtype": "int8", "clip_grad_norm": 1.0},
        offload={"optimizer": "cpu", "activations": "recompute"}),
    # the params on the host, the activations' store
    "gpt-params-cpu": lambda d, c: gpt(c, offload={"params": "cpu", "activations": "cpu"},
                                       model={"type": "gpt", "layers": 4, "heads": 2,
                                              "dim": 32, "seq": 16}),
    # two ranks, ZeRO-1: shards, the checkpoint's gather, two ranks a node
    "mlp-zero": lambda d, c: mlp(d, batch={"global": 32, "micro": 16},
                                 optimizer={"type": "adamw", "lr": 1e-3},
                                 parallel={"ranks": 2, "zero_stage": 1}),
    # a spec that asks for a GPU, run on the CPU: the CPU's plan
    "gpu-spec-on-cpu": lambda d, c: mlp(d, resources={"gpus_per_node": 1},
                                        precision={"compute": "bf16"}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_run_report_is_larch_plan(trainer, image_data, corpus, tmp_path, mpirun, case):
    s = CASES[case](image_data, corpus)
    path = trainer.write_spec(s, name=f"{case}.json")
    cmd = [str(trainer.exe), "--spec", str(path), "--job-dir", str(tmp_path / "job"),
           "--threads", "1"]
    ranks = s.get("parallel", {}).get("ranks", 1)
    if case == "gpu-spec-on-cpu":
        cmd += ["--device", "cpu"]
    if ranks > 1:
        cmd = [mpirun, "-n", str(ranks)] + cmd
    run = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=mpi_env())
    assert run.returncode == 0, run.stderr[-3000:]
    header, table = memory_table(run.stdout)

    # the plan of the same spec (on the CPU: what the run runs on)
    planned = dict(s, resources={"gpus_per_node": 0}) if case == "gpu-spec-on-cpu" else s
    cpu_path = tmp_path / "planned.json"
    cpu_path.write_text(json.dumps(planned))
    plan = json.loads(larch_plan(cpu_path, "--json"))
    assert report_lines(run.stdout) == report_lines(larch_plan(cpu_path)), run.stdout

    # item by item, and nothing else
    shown = {k: v for k, v in table.items() if v["mib"] is not None and not k.startswith("total")}
    assert set(shown) == set(plan["items"]), (shown, plan["items"])
    for item, nbytes in plan["items"].items():
        assert abs(shown[item]["mib"] - nbytes / MIB) <= 0.005 + 1e-9, (item, shown[item], nbytes)
        assert shown[item]["where"] == "host"
    assert abs(table["total host"]["mib"] - plan["host_bytes_per_rank"] / MIB) <= 0.005 + 1e-9
    assert "total device" not in table and plan["device_bytes_per_gpu"] == 0
    assert f"{plan['params']} parameters, micro-batch {plan['micro']}, {ranks} rank" in header
    assert header.endswith(", CPU"), header
    if ranks > 1:
        assert "(ZeRO-1)" in header and "1/2 of" in table["grad_shard"]["note"]
        assert abs(table["total node"]["mib"] - plan["host_bytes_per_node"] / MIB) <= 0.005 + 1e-9

    # the end of the run holds the peak against the same plan
    said = re.search(r"^memory: peak resident [\d.]+ MiB, planned ([\d.]+) MiB", run.stdout, re.M)
    assert said and abs(float(said.group(1)) - plan["host_bytes_per_rank"] / MIB) <= 0.05, \
        run.stdout
