"""larch-train learns: Fashion-MNIST from Debian's package, a tiny GPT on a
text Debian ships, and the same model on llm.c token files."""
import pathlib

import numpy as np
import pytest

from datasets import write_tokens_u16
from jobdir import metrics, result

FASHION = pathlib.Path("/usr/share/datasets/fashion-mnist")
CORPUS = pathlib.Path("/usr/share/common-licenses/GPL-3")  # base-files, on every Debian


def test_fashion_mnist_two_epochs(trainer, tmp_path):
    """The example spec's model and optimizer, 2 of its 20 epochs: the full run
    reaches >= 0.90 (tests/bench/bench_large_batch.py); two epochs reach ~0.88."""
    assert FASHION.is_dir(), "dataset-fashion-mnist is not installed (deploy/install-deps.sh)"
    spec = {
        "name": "fmnist-short",
        "model": {"type": "mlp", "hidden": [1024, 1024]},
        "data": {"name": "fashion-mnist"},
        "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9, "weight_decay": 5e-4},
        "schedule": {"warmup": {"epochs": 1}, "decay": "cosine"},
        "epochs": 2,
        "seed": 42,
        "log_every": 50,
    }
    job = tmp_path / "job"
    out = trainer.run(spec, job)
    assert out.returncode == 0, out.stderr
    res = result(job)
    assert res["steps"] == 2 * (60000 // 256)
    assert res["final"]["val/accuracy"] >= 0.85, res
    losses = [m["value"] for m in metrics(job) if m["name"] == "train/loss"]
    assert np.mean(losses[-20:]) < 0.5 * np.mean(losses[:5])


def gpt_spec(data, steps):
    return {
        "name": "gpt-text",
        "model": {"type": "gpt", "layers": 2, "heads": 4, "dim": 64, "seq": 64},
        "data": data,
        "batch": {"global": 32, "micro": 16},
        "optimizer": {"type": "adamw", "lr": 0.003, "weight_decay": 0.1, "clip_grad_norm": 1.0,
                      "exclude_from_weight_decay": ["bias", "norm"]},
        "schedule": {"warmup": {"steps": 20}, "decay": "cosine", "final_lr": 0.0003},
        "steps": steps,
        "eval_every": 100,
        "log_every": 25,
        "seed": 1,
    }


def bigram_cross_entropy(train, val):
    """Validation cross-entropy (nats per byte) of an add-one bigram model fitted on train."""
    counts = np.ones((256, 256))
    np.add.at(counts, (train[:-1], train[1:]), 1)
    probs = counts / counts.sum(axis=1, keepdims=True)
    return float(-np.log(probs[val[:-1], val[1:]]).mean())


def test_gpt_loss_falls_on_text(trainer, tmp_path):
    assert CORPUS.exists()
    job = tmp_path / "job"
    out = trainer.run(gpt_spec({"format": "text", "path": str(CORPUS), "val_fraction": 0.05}, 200), job)
    assert out.returncode == 0, out.stderr
    assert "tokens/s" in out.stdout
    train = [m["value"] for m in metrics(job) if m["name"] == "train/loss"]
    val = [m["value"] for m in metrics(job) if m["name"] == "val/loss"]
    # a byte-level model starts near ln(256) = 5.55; after 200 steps it must
    # predict held-out text better than bigram statistics of the training text do
    data = np.frombuffer(CORPUS.read_bytes(), dtype=np.uint8)
    held_out = int(round(len(data) * 0.05))
    baseline = bigram_cross_entropy(data[:-held_out], data[-held_out:])
    assert train[0] > 5.0
    assert np.mean(train[-10:]) < 2.6, train[-10:]
    assert val[-1] < baseline, (val, baseline)
    # at each progress line, the mean time a step spent after its last
    # backward (the norm, clipping and AdamW here): some, and less than the
    # whole step (global batch / samples per second)
    rate = {m["step"]: m["value"] for m in metrics(job) if m["name"] == "train/samples_per_s"}
    after = {m["step"]: m["value"] for m in metrics(job) if m["name"] == "train/after_backward_s"}
    assert after.keys() == rate.keys() and len(after) == 8, (after, rate)
    for step, seconds in after.items():
        assert 0 < seconds < 32 / rate[step], (step, seconds, rate[step])


def test_gpt_on_llmc_token_files(trainer, tmp_path):
    text = np.frombuffer(CORPUS.read_bytes(), dtype=np.uint8).astype(np.uint16)
    split = len(text) * 9 // 10
    write_tokens_u16(tmp_path / "train.bin", text[:split])
    write_tokens_u16(tmp_path / "val.bin", text[split:])
    data = {"format": "tokens_u16", "train": str(tmp_path / "train.bin"), "val": str(tmp_path / "val.bin")}
    spec = gpt_spec(data, 40)
    spec["model"]["vocab"] = 256
    job = tmp_path / "job"
    out = trainer.run(spec, job)
    assert out.returncode == 0, out.stderr
    train = [m["value"] for m in metrics(job) if m["name"] == "train/loss"]
    assert train[-1] < train[0] - 1.0


def test_token_past_the_vocabulary_is_refused(trainer, tmp_path):
    write_tokens_u16(tmp_path / "train.bin", np.arange(4000) % 300)
    spec = gpt_spec({"format": "tokens_u16", "train": str(tmp_path / "train.bin")}, 50)
    spec["model"]["vocab"] = 256
    out = trainer.run(spec, tmp_path / "job")
    assert out.returncode == 1
    assert "model.vocab: the data holds token 299, past the vocabulary of 256" in out.stderr


def test_init_job_needs_larchd(trainer, tmp_path):
    """init.job names a checkpoint of another larch job, which only larchd
    resolves: a run that still holds it fails at start, before any data."""
    spec = gpt_spec({"format": "text", "path": str(CORPUS)}, 50)
    spec["init"] = {"job": "j-000123", "step": 300}
    job = tmp_path / "job"
    job.mkdir()                        # as larchd makes it
    out = trainer.run(spec, job)
    want = ("init.job: names a checkpoint of a larch job, which larchd resolves; "
            "a run outside larchd needs init.from")
    assert out.returncode == 2, out.stderr
    assert want in out.stderr
    assert result(job)["reason"] == want
