"""Details of the larch CLI's output (service/cli) and of what larchd tells it:
`larch plan`'s verdict line for every combination of limits, `larch watch`'s
rates, total and final line, `larch logs` of a failed job, `larch metrics` of
a job that has not reported yet, and the resolved path in a missing relative
data file's error. One larchd for the module; the jobs are tiny."""
import json
import re
import subprocess

import pytest

from larchd import BUILD

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2

BIG_MLP = {"name": "big-mlp", "model": {"type": "mlp", "hidden": [4096, 4096]},
           "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
           "optimizer": {"type": "adamw", "lr": 0.001}, "steps": 3, "log_every": 1}
ON_GPU = dict(BIG_MLP, name="big-gpu", resources={"gpus_per_node": 1})


def larch_exe():
    exe = BUILD / "service" / "larch"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build with -DWITH_SERVICE=ON first")
    return exe


def larch(*args, env=None, input=None, cwd=None, timeout=60):
    return subprocess.run([str(larch_exe()), *map(str, args)], env=env, input=input, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


# ---- larch plan: the line under the plan ---------------------------------------------

NEEDS_HOST = r"it needs \d+\.\d\d GiB of host memory per node \({} GiB given\)"
NEEDS_GPU = r"\d+\.\d\d GiB per GPU \({} GiB given\)"
NO_GPU = " (a CPU job: --gpu-mem does not apply)"


@pytest.mark.parametrize("spec, args, rc, last", [
    (BIG_MLP, [], EXIT_OK, None),
    (BIG_MLP, ["--host-mem", "16"], EXIT_OK, re.escape("fits in 16 GiB of host memory per node")),
    (BIG_MLP, ["--gpu-mem", "80"], EXIT_OK,
     re.escape("fits: a CPU job needs no GPU memory (--gpu-mem does not apply)")),
    (BIG_MLP, ["--host-mem", "16", "--gpu-mem", "80"], EXIT_OK,
     re.escape("fits in 16 GiB of host memory per node" + NO_GPU)),
    (BIG_MLP, ["--host-mem", "0.5"], EXIT_REFUSED,
     "does not fit: " + NEEDS_HOST.format(r"0\.5") + ", not even at micro-batch 1"),
    (BIG_MLP, ["--host-mem", "0.5", "--gpu-mem", "0.1"], EXIT_REFUSED,
     "does not fit: " + NEEDS_HOST.format(r"0\.5") + ", not even at micro-batch 1" +
     re.escape(NO_GPU)),
    (ON_GPU, [], EXIT_OK, None),
    (ON_GPU, ["--host-mem", "16"], EXIT_OK, re.escape("fits in 16 GiB of host memory per node")),
    (ON_GPU, ["--gpu-mem", "80"], EXIT_OK, re.escape("fits in 80 GiB per GPU")),
    (ON_GPU, ["--host-mem", "16", "--gpu-mem", "80"], EXIT_OK,
     re.escape("fits in 16 GiB of host memory per node and 80 GiB per GPU")),
    (ON_GPU, ["--host-mem", "16", "--gpu-mem", "0.1"], EXIT_REFUSED,
     "does not fit: it needs " + NEEDS_GPU.format(r"0\.1") + ", not even at micro-batch 1"),
    (ON_GPU, ["--host-mem", "0.5", "--gpu-mem", "0.1"], EXIT_REFUSED,
     "does not fit: " + NEEDS_HOST.format(r"0\.5") + " and " + NEEDS_GPU.format(r"0\.1") +
     ", not even at micro-batch 1"),
])
def test_plan_verdict_line(tmp_path, spec, args, rc, last):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = larch("plan", path, *args)
    assert out.returncode == rc, out.stderr
    lines = out.stdout.splitlines()
    assert out.stderr == "" and lines[0].startswith("memory plan per rank: ")
    # every line of the table: an item, its MiB, where; nothing run together
    for line in lines[2:-1] if last else lines[2:]:
        assert re.match(r"^  [a-z_]+ +\d+\.\d\d(  \S.*)?$", line), line
    if last is None:
        assert not re.search(r"fit", out.stdout)
    else:
        assert re.fullmatch(last, lines[-1]), lines[-1]


def test_plan_verdict_names_the_largest_micro_batch(tmp_path):
    """Between 'not at all' and 'fits': the limit it breaks and the micro-batch
    that would fit, which then fits."""
    spec = dict(BIG_MLP, batch={"global": 4096, "micro": 4096})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    fits_at = json.loads(larch("plan", "--json", path).stdout)
    host = (fits_at["host_bytes_per_node"] - 64 * 1024 ** 2) / 1024 ** 3
    out = larch("plan", path, "--host-mem", f"{host:.3f}")
    assert out.returncode == EXIT_REFUSED, out.stderr
    m = re.fullmatch("does not fit: " + NEEDS_HOST.format(re.escape(f"{host:.3f}".rstrip("0")))
                     + r"; the largest micro-batch that fits is (\d+)", out.stdout.splitlines()[-1])
    assert m, out.stdout
    best = int(m.group(1))
    assert 0 < best < 4096
    path.write_text(json.dumps(dict(spec, batch={"global": best, "micro": best})))
    out = larch("plan", path, "--host-mem", f"{host:.3f}")
    assert out.returncode == EXIT_OK
    assert out.stdout.splitlines()[-1] == f"fits in {host:.3f}".rstrip("0") + \
        " GiB of host memory per node"
