"""larch-train --probe, which larchd runs as the job's user before it accepts
a job: one JSON object on stdout, exit 0, for good and bad inputs alike; the
data's shape; confinement to --data-root; relative paths under --base-dir;
nothing of a file that fails to parse in the answer; a FIFO answered at
once. And larch-train itself confined by --data-root."""
import json
import os
import pathlib
import subprocess

import numpy as np
import pytest

from datasets import write_idx, write_image_set, write_tokens_u16

FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
SECRET = b"root:$y$j9T$Zq7Vb3kXw2Pn0Lr5:19700:0:99999:7:::\nlarch:$y$j9T$Kp2Qm8Rt4Lz6:19700::\n"


def mlp_spec(data, global_batch=64):
    return {"model": {"type": "mlp", "hidden": [16]}, "data": data,
            "batch": {"global": global_batch}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 2}


def gpt_spec(data, global_batch=8):
    return {"model": {"type": "gpt", "layers": 1, "heads": 2, "dim": 16, "seq": 16},
            "data": data, "batch": {"global": global_batch},
            "optimizer": {"type": "adamw", "lr": 0.001}, "steps": 2}


def probe(larch_train, spec, *args, cwd=None):
    """Runs the probe with the spec on stdin; returns the parsed answer."""
    text = spec if isinstance(spec, str) else json.dumps(spec)
    out = subprocess.run([str(larch_train), "--probe", "--spec", "-", *map(str, args)],
                         input=text, capture_output=True, text=True, timeout=60, cwd=cwd)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    lines = out.stdout.splitlines()
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])


def failure(answer, field):
    assert answer["ok"] is False, answer
    assert answer["field"] == field, answer
    assert answer["message"].startswith(field + ": "), answer
    return answer["message"]


def renderings(secret):
    """What a message could show of a file's first bytes."""
    out = {secret[:4].decode(), secret[:8].decode()}
    for off in (0, 4, 8):
        for order in ("big", "little"):
            v = int.from_bytes(secret[off:off + 4], order)
            out |= {str(v), str(v - (1 << 32) if v >= 1 << 31 else v), f"{v:x}", f"{v:08x}",
                    f"{v:X}"}
    for off in (0, 8):
        for order in ("big", "little"):
            v = int.from_bytes(secret[off:off + 8], order)
            out |= {str(v), str(v - (1 << 64) if v >= 1 << 63 else v), f"{v:x}"}
    return out


def assert_no_leak(message, path):
    """(the path, which may hold anything, such as "root", is left out)"""
    rest = message.replace(str(path), "")
    leaked = [r for r in renderings(SECRET) if r in rest]
    assert not leaked, (leaked, message)


@pytest.fixture
def data(tmp_path):
    """An image set, a token file and a text file under tmp_path/data."""
    root = tmp_path / "data"
    root.mkdir()
    images = write_image_set(root, n_train=128, n_val=32, side=8, classes=5)
    write_tokens_u16(root / "train.bin", np.arange(2000) % 500)
    write_tokens_u16(root / "val.bin", np.arange(300) % 500)
    (root / "corpus.txt").write_bytes(b"the quick brown fox jumps over the lazy dog. " * 40)
    return {"root": root, "idx": images,
            "tokens": {"format": "tokens_u16", "train": str(root / "train.bin"),
                       "val": str(root / "val.bin")},
            "text": {"format": "text", "path": str(root / "corpus.txt"), "val_fraction": 0.1}}


def test_shapes(larch_train, data):
    a = probe(larch_train, mlp_spec(data["idx"]))
    assert a == {"ok": True, "shape": {"task": "classify", "dim": 64, "n_classes": 5, "seq": 0,
                                       "vocab": 0, "train_samples": 128, "val_samples": 32,
                                       "train_tokens": 0, "val_tokens": 0}}, a
    a = probe(larch_train, gpt_spec(data["tokens"]))
    assert a["ok"] and a["shape"] == {"task": "tokens", "dim": 0, "n_classes": 0, "seq": 16,
                                      "vocab": 0, "train_samples": 1999 // 16,
                                      "val_samples": 299 // 16, "train_tokens": 2000,
                                      "val_tokens": 300}, a
    a = probe(larch_train, gpt_spec(data["text"]))
    n = 45 * 40
    held = round(n * 0.1)
    assert a["ok"] and a["shape"]["vocab"] == 256, a
    assert (a["shape"]["train_tokens"], a["shape"]["val_tokens"]) == (n - held, held), a
    assert a["shape"]["train_samples"] == (n - held - 1) // 16, a


def test_named_dataset(larch_train):
    assert FASHION.is_dir(), "dataset-fashion-mnist is not installed (deploy/install-deps.sh)"
    # named data sets are Debian's files: read even when nothing else may be
    a = probe(larch_train, mlp_spec({"name": "fashion-mnist"}), "--confine-data")
    assert a["ok"], a
    s = a["shape"]
    assert (s["dim"], s["n_classes"], s["train_samples"], s["val_samples"]) == (784, 10, 60000,
                                                                               10000), s


def test_files_that_are_not_data(larch_train, data, tmp_path):
    spec = mlp_spec(dict(data["idx"]))
    train = dict(spec["data"]["train"])
    spec["data"]["train"] = train
    train["images"] = str(tmp_path / "missing")
    assert "No such file or directory" in failure(probe(larch_train, spec), "data.train.images")
    os.mkfifo(tmp_path / "fifo")
    train["images"] = str(tmp_path / "fifo")   # no writer: a plain open would block
    assert failure(probe(larch_train, spec), "data.train.images").endswith(": not a regular file")
    train["images"] = "/dev/null"
    assert failure(probe(larch_train, spec), "data.train.images").endswith(": not a regular file")
    train["images"] = "/proc/self/environ"
    assert failure(probe(larch_train, spec), "data.train.images").endswith(": is empty")
    train["images"] = data["idx"]["train"]["images"]
    train["labels"] = str(tmp_path / "fifo")
    assert failure(probe(larch_train, spec), "data.train.labels").endswith(": not a regular file")
    # a token file whose header does not match its size
    (tmp_path / "cut.bin").write_bytes((data["root"] / "train.bin").read_bytes()[:-2])
    bad = gpt_spec({"format": "tokens_u16", "train": str(tmp_path / "cut.bin")})
    assert "truncated" in failure(probe(larch_train, bad), "data.train")


def test_bytes_of_a_bad_file_never_come_back(larch_train, data, tmp_path):
    secret = data["root"] / "secret"
    secret.write_bytes(SECRET)
    spec = mlp_spec({"format": "idx", "train": {"images": str(secret),
                                                "labels": data["idx"]["train"]["labels"]}})
    assert_no_leak(failure(probe(larch_train, spec), "data.train.images"), secret)
    spec["data"]["train"] = {"images": data["idx"]["train"]["images"], "labels": str(secret)}
    assert_no_leak(failure(probe(larch_train, spec), "data.train.labels"), secret)
    assert_no_leak(failure(probe(larch_train, gpt_spec({"format": "tokens_u16",
                                                        "train": str(secret)})), "data.train"),
                   secret)
    spec = gpt_spec(data["text"])
    spec["init"] = {"from": str(secret)}
    assert_no_leak(failure(probe(larch_train, spec), "init.from"), secret)


def test_confinement(larch_train, data, tmp_path):
    root = data["root"]
    outside = tmp_path / "outside.txt"
    outside.write_bytes(SECRET)
    (root / "escape.txt").symlink_to(outside)
    (root / "alias.txt").symlink_to("corpus.txt")
    ok = gpt_spec(data["text"])
    assert probe(larch_train, ok, "--data-root", root)["ok"]
    alias = gpt_spec(dict(data["text"], path=str(root / "alias.txt")))
    assert probe(larch_train, alias, "--data-root", root)["ok"]
    for path in (outside, root / "escape.txt", "/etc/shadow", root / ".." / "outside.txt"):
        spec = gpt_spec(dict(data["text"], path=str(path)))
        message = failure(probe(larch_train, spec, "--data-root", root), "data.path")
        assert message == f"data.path: {path} is outside the directories this job may read"
    # several roots, one of them a single file
    beside = tmp_path / "beside.txt"
    beside.write_bytes(b"a corpus of its own, named as a root by itself. " * 40)
    spec = gpt_spec(dict(data["text"], path=str(beside)))
    assert probe(larch_train, spec, "--data-root", root, "--data-root", beside)["ok"]
    assert "outside the directories" in failure(probe(larch_train, spec, "--data-root", root),
                                                "data.path")
    # --confine-data alone: nothing a user names
    assert "outside the directories" in failure(probe(larch_train, ok, "--confine-data"),
                                                "data.path")
    # init.from is confined like the data
    spec = gpt_spec(data["text"])
    spec["init"] = {"from": str(outside)}
    assert "outside the directories" in failure(probe(larch_train, spec, "--data-root", root),
                                                "init.from")


def test_relative_paths_under_the_job_dir(larch_train, tmp_path):
    """larchd's job dir <state>/jobs/j-NNNNNN does not exist when the probe
    runs; ../ leads out of it as it will when the job runs there."""
    state = tmp_path / "state"
    (state / "jobs").mkdir(parents=True)
    (state / "data").mkdir()
    (state / "data" / "corpus.txt").write_bytes(b"all work and no play makes jack a dull boy " * 30)
    (state / "jobs" / "corpus.txt").write_bytes(b"a file beside the job dirs " * 60)
    job = state / "jobs" / "j-000042"
    spec = gpt_spec({"format": "text", "path": "../../data/corpus.txt"})
    a = probe(larch_train, spec, "--base-dir", job, cwd=tmp_path)
    assert a["ok"] and a["shape"]["train_tokens"] + a["shape"]["val_tokens"] == 43 * 30, a
    a = probe(larch_train, gpt_spec({"format": "text", "path": "./../corpus.txt"}),
              "--base-dir", job, cwd=tmp_path)
    assert a["ok"] and a["shape"]["train_tokens"] + a["shape"]["val_tokens"] == 27 * 60, a
    for path in ("corpus.txt", "./corpus.txt", "sub/../../corpus.txt"):
        message = failure(probe(larch_train, gpt_spec({"format": "text", "path": path}),
                                "--base-dir", job, cwd=tmp_path), "data.path")
        assert message == ("data.path: a relative path names a file in the job's own "
                           "directory, which is empty when the job starts")
    # confined: the rebased path is what must lie under a root
    a = probe(larch_train, spec, "--base-dir", job, "--data-root", state / "data", cwd=tmp_path)
    assert a["ok"], a
    message = failure(probe(larch_train, gpt_spec({"format": "text", "path": "../corpus.txt"}),
                            "--base-dir", job, "--data-root", state / "data"), "data.path")
    assert message.endswith("is outside the directories this job may read")
    # without --base-dir a relative path is the working directory's
    a = probe(larch_train, gpt_spec({"format": "text", "path": "data/corpus.txt"}), cwd=state)
    assert a["ok"], a
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state"]   # the probe wrote nothing
    assert sorted(p.name for p in state.iterdir()) == ["data", "jobs"]


def test_what_the_trainer_would_refuse(larch_train, data):
    a = probe(larch_train, mlp_spec(data["idx"], global_batch=256))
    assert failure(a, "batch.global") == ("batch.global: must not exceed the 128 samples of "
                                          "the train split (got 256)")
    # an init by job is larchd's to check (the database): the probe passes it by
    spec = gpt_spec(data["text"])
    spec["init"] = {"job": "j-000007"}
    assert probe(larch_train, spec)["ok"]
    # a path that names nothing here says so, for larchd's Slurm executor
    a = probe(larch_train, gpt_spec({"format": "text", "path": str(data["text"]) + ".gone"}))
    assert a["kind"] == "missing" and failure(a, "data.path")
    assert failure(probe(larch_train, "{\"model\": "), "spec").startswith("spec: invalid JSON")
    bad = gpt_spec(data["text"])
    bad["batch"]["micro"] = 3
    assert failure(probe(larch_train, bad), "batch.global")


def test_usage_errors(larch_train, data, tmp_path):
    spec = json.dumps(gpt_spec(data["text"]))
    for args in (["--base-dir", "relative/dir"], ["--data-root", tmp_path / "missing"]):
        out = subprocess.run([str(larch_train), "--probe", "--spec", "-", *map(str, args)],
                             input=spec, capture_output=True, text=True, timeout=60)
        assert out.returncode == 2 and out.stdout == "", out
    out = subprocess.run([str(larch_train), "--spec", "-", "--base-dir", str(tmp_path)],
                         input=spec, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "--base-dir: goes with --probe" in out.stderr


def test_the_trainer_is_confined(larch_train, data, tmp_path):
    """The trainer opens its inputs as the probe does: a path that passed the
    probe but leads outside when the job runs fails there too."""
    spec = gpt_spec(data["text"])
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    job = tmp_path / "job"
    job.mkdir()
    out = subprocess.run([str(larch_train), "--spec", str(path), "--job-dir", str(job),
                          "--data-root", str(job)], capture_output=True, text=True, timeout=120)
    assert out.returncode == 1, out.stderr
    want = f"data.path: {data['text']['path']} is outside the directories this job may read"
    assert want in out.stderr
    assert json.loads((job / "result.json").read_text())["reason"] == want


def test_init_from_a_confined_checkpoint(larch_train, data, tmp_path):
    """larchd resolves init.job to a checkpoint path and passes it as a root:
    the second run starts from the first one's parameters."""
    def run(spec, job, *args):
        path = tmp_path / f"{job.name}.json"
        path.write_text(json.dumps(spec))
        return subprocess.run([str(larch_train), "--spec", str(path), "--job-dir", str(job),
                               "--quiet", *map(str, args)], capture_output=True, text=True,
                              timeout=300)

    first = tmp_path / "first"
    out = run(gpt_spec(data["text"]), first)
    assert out.returncode == 0, out.stderr
    ckpt, = (first / "checkpoints").iterdir()
    spec = gpt_spec(data["text"])
    spec["init"] = {"from": str(ckpt)}
    roots = ["--data-root", data["root"], "--data-root", ckpt]
    assert probe(larch_train, spec, *roots)["ok"]
    out = run(spec, tmp_path / "second", *roots)
    assert out.returncode == 0, out.stderr
    # without the checkpoint among the roots it is refused, by the probe and the run
    want = f"init.from: {ckpt} is outside the directories this job may read"
    assert failure(probe(larch_train, spec, *roots[:2]), "init.from") == want
    out = run(spec, tmp_path / "third", *roots[:2])
    assert out.returncode == 1 and want in out.stderr, out.stderr
