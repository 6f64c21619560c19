"""larch export (service/cli/export.c): the CLI runs the larch-train beside
it (--export, trainer/export_hf.c) on a checkpoint this machine can read,
with no server, and passes on its verdict. The formats themselves are
checked numerically in tests/numeric/test_hf_export.py."""
import json
import subprocess

import numpy as np
import pytest

from datasets import write_tokens_u16
from larchd import BUILD

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3


def larch(*args, cwd=None):
    exe = BUILD / "service" / "larch"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build with -DWITH_SERVICE=ON first")
    # no server runs at this URL: export must not need one
    return subprocess.run([str(exe), "--url", "http://127.0.0.1:9", *map(str, args)],
                          cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("export")
    write_tokens_u16(d / "tokens.bin", np.arange(2048) % 50)
    spec = {"name": "tiny", "model": {"type": "gpt", "layers": 1, "heads": 2, "dim": 16,
                                      "seq": 8, "vocab": 50},
            "data": {"format": "tokens_u16", "train": str(d / "tokens.bin")},
            "batch": {"global": 2}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 1}
    (d / "spec.json").write_text(json.dumps(spec))
    run = subprocess.run([str(BUILD / "trainer" / "larch-train"), "--spec", "spec.json",
                          "--job-dir", "job", "--quiet", "--threads", "1"], cwd=d,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return d


def test_export_writes_the_directory(job):
    ckpt = job / "job" / "checkpoints" / "step-00000001.safetensors"
    out = larch("export", ckpt, "--format", "hf-gpt2", "-o", job / "hf")
    assert out.returncode == EXIT_OK, out.stderr
    assert "model.safetensors" in out.stdout
    cfg = json.loads((job / "hf" / "config.json").read_text())
    assert (cfg["model_type"], cfg["n_layer"], cfg["n_embd"], cfg["vocab_size"]) == \
        ("gpt2", 1, 16, 50)
    assert (job / "hf" / "model.safetensors").stat().st_size > 16 * 50 * 4


def test_export_errors(job):
    ckpt = job / "job" / "checkpoints" / "step-00000001.safetensors"
    out = larch("export", ckpt, "--format", "hf-mlp", "-o", job / "x")
    assert out.returncode == EXIT_USAGE and "use --format hf-gpt2" in out.stderr
    out = larch("export", ckpt, "-o", job / "x")
    assert out.returncode == EXIT_USAGE and "--format hf-gpt2|hf-mlp" in out.stderr
    out = larch("export", job / "nothing.safetensors", "--format", "hf-gpt2", "-o", job / "x",
                "--spec", job / "spec.json")
    assert out.returncode == EXIT_REFUSED and "nothing.safetensors" in out.stderr
    out = larch("export", ckpt, "--step", "1", "--format", "hf-gpt2", "-o", job / "x")
    assert out.returncode == EXIT_USAGE and "--step goes with a job id" in out.stderr
    # a job id that is no file here asks larchd (none runs at this URL)
    out = larch("export", "j-000123", "--format", "hf-gpt2", "-o", job / "x")
    assert out.returncode == EXIT_UNREACHABLE and "cannot reach larchd" in out.stderr
    assert not (job / "x").exists()
