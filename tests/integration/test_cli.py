"""larch-train's command line: usage, bad specs and bad data, exit codes and messages."""
import json
import os
import re
import subprocess

import pytest

from datasets import write_image_set
from jobdir import result

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def small_spec(data, **over):
    spec = {
        "name": "cli",
        "model": {"type": "mlp", "hidden": [32]},
        "data": data,
        "batch": {"global": 32},
        "optimizer": {"type": "sgd", "lr": 0.05},
        "steps": 4,
    }
    spec.update(over)
    return spec


@pytest.fixture
def image_data(tmp_path):
    return write_image_set(tmp_path, n_train=128, n_val=32, side=8)


def test_help_and_version(larch_train):
    out = subprocess.run([larch_train, "--help"], capture_output=True, text=True)
    assert out.returncode == EXIT_OK
    assert "usage: larch-train --spec FILE" in out.stdout
    out = subprocess.run([larch_train, "--version"], capture_output=True, text=True)
    assert out.returncode == EXIT_OK and out.stdout.startswith("larch-train ")


@pytest.mark.parametrize("args, message", [
    ([], "--spec FILE is required"),
    (["--bogus"], "usage:"),
    (["--spec", "x.json", "extra"], 'unexpected argument "extra"'),
    (["--spec", "x.json", "--threads", "0"], "--threads: must be an integer in [1, 4096]"),
    (["--spec", "x.json", "--threads", "2x"], "--threads: must be an integer"),
])
def test_bad_command_lines(larch_train, args, message):
    out = subprocess.run([larch_train] + args, capture_output=True, text=True)
    assert out.returncode == EXIT_USAGE
    assert message in out.stderr


@pytest.mark.parametrize("var, value, message", [
    ("LARCH_CUDA_SYNC", "maybe", "LARCH_CUDA_SYNC: must be 1, true, yes, on, 0, false, no or off"),
    ("LARCH_CUDA_KERNEL_PICKS", "xent", "LARCH_CUDA_KERNEL_PICKS: pick xent: not KEY=N"),
    ("LARCH_CUDA_BACKEND", "/nonexistent/backend.so",
     'LARCH_CUDA_BACKEND: not a file: "/nonexistent/backend.so"'),
])
def test_a_bad_gpu_option_exits_2_naming_the_variable(larch_train, var, value, message):
    # the GPU's rows are read with the others, before the spec or a device:
    # a CPU build or run refuses them too, and so does --list-devices
    env = dict(os.environ, **{var: value})
    for args in (["--spec", "x.json"], ["--list-devices"]):
        out = subprocess.run([larch_train] + args, capture_output=True, text=True, env=env)
        assert out.returncode == EXIT_USAGE, (args, out.stderr)
        assert message in out.stderr


def test_the_gpu_options_are_rows_of_the_options_line(trainer, image_data, tmp_path):
    picks = "xent-fwd-bwd:bf16,8x64=1 ln-res:bf16=0"
    env = dict(os.environ, LARCH_CUDA_SYNC="on", LARCH_CUDA_KERNEL_PICKS=picks,
               LARCH_CUDA_BACKEND=str(trainer.exe))
    cmd = [str(trainer.exe), "--spec", str(trainer.write_spec(small_spec(image_data))),
           "--job-dir", str(tmp_path / "job"), "--device", "cpu"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == EXIT_OK, out.stderr
    options = [l for l in out.stdout.splitlines() if l.startswith("options: ")]
    assert len(options) == 1, out.stdout
    assert f"cuda_backend {trainer.exe} (LARCH_CUDA_BACKEND)" in options[0]
    assert "cuda_sync on (LARCH_CUDA_SYNC)" in options[0]
    assert f"cuda_kernel_picks {picks} (LARCH_CUDA_KERNEL_PICKS)" in options[0]
    out = subprocess.run([str(trainer.exe), "--help"], capture_output=True, text=True)
    for row in ("LARCH_CUDA_BACKEND", "LARCH_CUDA_SYNC", "LARCH_CUDA_KERNEL_PICKS"):
        assert f"  {row} " in out.stdout, out.stdout


def test_check_prints_the_effective_spec(trainer, image_data):
    path = trainer.write_spec(small_spec(image_data))
    out = subprocess.run([trainer.exe, "--check", path], capture_output=True, text=True)
    assert out.returncode == EXIT_OK, out.stderr
    effective = json.loads(out.stdout)
    assert effective["batch"] == {"global": 32, "micro": 32, "reference": 32}
    assert effective["optimizer"]["momentum"] == 0.9
    assert effective["keep_checkpoints"] == 3


@pytest.mark.parametrize("text, message", [
    ('{"name": "x",', "spec: invalid JSON at line 1"),
    ("[1, 2]", "spec: must be a JSON object"),
    (None, 'model: unknown field "hiden"'),
    ("missing-file", "No such file"),
])
def test_bad_specs_exit_2_with_the_field(trainer, image_data, tmp_path, text, message):
    if text is None:
        spec = small_spec(image_data)
        spec["model"] = {"type": "mlp", "hiden": [32]}
        path = trainer.write_spec(spec)
    elif text == "missing-file":
        path = tmp_path / "does-not-exist.json"
    else:
        path = trainer.write_spec(text)
    job = tmp_path / "job"
    out = trainer.run(path, job)
    assert out.returncode == EXIT_USAGE
    assert message in out.stderr
    assert not job.exists(), "a rejected spec must not create the job dir"


def test_batch_divisibility_names_both_fields(trainer, image_data, tmp_path):
    spec = small_spec(image_data, batch={"global": 100, "micro": 32})
    out = trainer.run(spec, tmp_path / "job")
    assert out.returncode == EXIT_USAGE
    assert "batch.global: must be a multiple of batch.micro x parallel.ranks" in out.stderr


@pytest.mark.parametrize("section, value, message", [
    ("parallel", {"zero_stage": 2}, "parallel.zero_stage: ZeRO stage 2 is not supported"),
])
def test_features_of_later_issues_are_refused_up_front(trainer, image_data, tmp_path, section, value, message):
    spec = small_spec(image_data, batch={"global": 32, "micro": 16})
    spec[section] = value
    job = tmp_path / "job"
    out = trainer.run(spec, job)
    assert out.returncode == EXIT_USAGE
    assert message in out.stderr
    assert not job.exists(), "a spec this build cannot run is refused like a bad one"


def test_missing_data_file_fails_naming_the_file(trainer, image_data, tmp_path):
    image_data["train"]["labels"] = str(tmp_path / "nope.idx")
    job = tmp_path / "job"
    out = trainer.run(small_spec(image_data), job)
    assert out.returncode == EXIT_FAILED
    assert "nope.idx" in out.stderr
    res = result(job)
    assert res["status"] == "failed" and res["exit_code"] == EXIT_FAILED
    assert "nope.idx" in res["reason"]


def test_job_dir_blocked_by_a_file(trainer, image_data, tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("not a directory")
    out = trainer.run(small_spec(image_data), blocker / "job")
    assert out.returncode == EXIT_FAILED
    assert "job dir" in out.stderr


def test_resume_requires_a_checkpoint(trainer, image_data, tmp_path):
    out = trainer.run(small_spec(image_data), tmp_path / "job", "--resume")
    assert out.returncode == EXIT_USAGE
    assert "--resume: no checkpoint" in out.stderr


def test_a_changed_spec_does_not_resume_another_runs_checkpoint(trainer, image_data, tmp_path):
    job = tmp_path / "job"
    first = trainer.run(small_spec(image_data), job)
    assert first.returncode == EXIT_OK, first.stderr
    changed = small_spec(image_data, optimizer={"type": "sgd", "lr": 0.1})
    out = trainer.run(changed, job)
    assert out.returncode == EXIT_USAGE
    assert "written for a different spec" in out.stderr


def test_completed_run_writes_its_contract(trainer, image_data, tmp_path):
    job = tmp_path / "job"
    out = trainer.run(small_spec(image_data, log_every=2), job, "--threads", "1")
    assert out.returncode == EXIT_OK, out.stderr
    # the options table, printed once, names where each value came from;
    # the BLAS runs on the threads the command line gave
    options = [l for l in out.stdout.splitlines() if l.startswith("options: ")]
    assert len(options) == 1 and "threads 1 (--threads)" in options[0], out.stdout
    assert "cpu_isa auto" in options[0] and "comm_timeout_s 120" in options[0]
    blas = [l for l in out.stdout.splitlines() if l.startswith("blas: ")]
    assert len(blas) == 1 and blas[0].endswith(", 1 threads"), out.stdout
    assert re.search(r"^memory plan per rank: \d+ parameters, micro-batch \d+, 1 rank, CPU$",
                     out.stdout, re.M), out.stdout
    assert re.search(r"^  params +[\d.]+ MiB  host +fp32$", out.stdout, re.M), out.stdout
    assert "step 4/4 | epoch" in out.stdout and "samples/s" in out.stdout
    res = result(job)
    assert res["status"] == "completed" and res["steps"] == 4 and res["exit_code"] == 0
    assert set(res["final"]) == {"val/loss", "val/accuracy", "train/loss"}
    assert json.loads((job / "spec.json").read_text())["name"] == "cli"
    assert (job / "checkpoints" / "step-00000004.safetensors").exists()
