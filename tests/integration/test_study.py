"""Batch-scaling studies and early stopping of sweeps, through a real larchd
on the local executor with the real larch-train on Fashion-MNIST (a small
MLP that reaches 80% validation accuracy in a second or two).

- a batch_scaling study: one child per batch size with spec.stop set to
  the target, each ending COMPLETED at the evaluation that reached it; the
  sweep's "study" with its points, speed-ups and the McCandlish fit;
- early stopping (median rule): of two children, the one whose learning
  rate is a millionth of the other's falls behind and is CANCELLED with
  reason early-stopped;
- bad study bodies and stop targets: 400 naming the field, nothing stored.
"""
import os
import subprocess

import pytest

from larchd import BUILD, poll

from test_api_jobs import Server

FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
TARGET = {"metric": "val/accuracy", "value": 0.8, "mode": "max"}


def base_spec(steps=400, **extra):
    return {"model": {"type": "mlp", "hidden": [32]}, "data": {"name": "fashion-mnist"},
            "batch": {"global": 256, "reference": 256},
            "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
            "schedule": {"lr_scaling": "sqrt"}, "steps": steps, "eval_every": 5,
            "log_every": 50, "checkpoint_at_end": False, **extra}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("study"), ["--max-local-jobs", "2"])
    yield server
    server.stop()


def get_sweep(srv, sid):
    r = srv.get(f"/v1/sweeps/{sid}", srv.alice)
    assert r.status_code == 200, r.text
    return r.json()


def wait_sweep(srv, sid, pred, timeout=120):
    return poll(lambda: get_sweep(srv, sid), pred, timeout,
                lambda s: f"{sid}: {s['state']} {s['counts']}", interval=0.2)


def larch(srv, tmp_path, *args):
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "LARCH_URL": srv.url,
           "LARCH_TOKEN": srv.alice["Authorization"].split()[1]}
    return subprocess.run([str(BUILD / "service" / "larch"), *args], env=env,
                          capture_output=True, text=True, timeout=30)


def test_batch_scaling_study(srv, tmp_path):
    body = {"kind": "batch_scaling", "name": "bs", "base": base_spec(),
            "batch_sizes": [64, 128, 256, 1024], "target": TARGET, "max_parallel": 2,
            "labels": {"study": "fmnist"}}
    r = srv.post("/v1/sweeps", srv.alice, body)
    assert r.status_code == 201, r.text
    s = r.json()
    assert s["children_count"] == 4 and s["study"]["reference"] == 256
    assert [c["params"] for c in s["children"]] == [{"batch.global": b} for b in (64, 128, 256, 1024)]
    # each child: its batch, the target as its stop, evaluations at the same examples
    for c, every in zip(s["children"], (20, 10, 5, 1)):
        spec = srv.job(c["job"], srv.alice)["spec"]
        assert spec["batch"]["global"] == c["params"]["batch.global"]
        assert spec["stop"] == TARGET and spec["eval_every"] == every
        assert spec["schedule"]["lr_scaling"] == "sqrt" and spec["steps"] == 400

    done = wait_sweep(srv, s["id"], lambda x: x["state"] in FINAL)
    assert done["state"] == "COMPLETED" and done["counts"]["COMPLETED"] == 4, done
    study = done["study"]
    assert study["speedup_against"] == 256
    for p, c in zip(study["points"], done["children"]):
        assert p["job"] == c["job"] and p["state"] == "COMPLETED"
        assert p["steps"] == c["steps_to_target"] and p["steps"] < 400
        assert p["examples"] == p["steps"] * p["batch"]
        # it stopped at the evaluation that reached the target
        assert c["step"] == p["steps"], c
        job = srv.job(c["job"], srv.alice)
        assert job["state"] == "COMPLETED"
    ref = next(p for p in study["points"] if p["batch"] == 256)
    assert ref["speedup"] == pytest.approx(1.0)
    # fewer steps at larger batches, more examples
    steps = [p["steps"] for p in study["points"]]
    assert steps[0] > steps[-1]
    fit = study["fit"]
    assert fit is not None and len(fit["residuals"]) == 4 and fit["points"] == 4
    assert fit["b_crit"] > 0 and fit["s_min"] > 0
    assert fit["e_min"] == pytest.approx(fit["s_min"] * fit["b_crit"], rel=1e-9)
    assert fit["s_min"] <= min(steps) * 1.5

    # the CLI prints the study's table and the fit
    out = larch(srv, tmp_path, "sweep", "show", s["id"])
    assert out.returncode == 0, out.stderr
    assert "study (reference batch 256" in out.stdout and "b_crit" in out.stdout
    row = next(line.split() for line in out.stdout.splitlines() if line.startswith("1024 "))
    assert row[3] == str(study["points"][3]["steps"]), out.stdout


def test_study_without_enough_points_says_so(srv, tmp_path):
    # a target no child reaches in 10 steps: no fit, a note
    body = {"kind": "batch_scaling", "name": "short", "base": base_spec(steps=10),
            "batch_sizes": [128, 256, 512], "target": {"metric": "val/accuracy", "value": 0.99}}
    r = srv.post("/v1/sweeps", srv.alice, body)
    assert r.status_code == 201, r.text
    done = wait_sweep(srv, r.json()["id"], lambda x: x["state"] in FINAL)
    assert done["state"] == "COMPLETED"
    assert done["study"]["fit"] is None and "0 of 3" in done["study"]["note"]
    assert all(p["steps"] is None and p["speedup"] is None for p in done["study"]["points"])
    out = larch(srv, tmp_path, "sweep", "show", done["id"])
    assert out.returncode == 0 and "fit:       none" in out.stdout and "0 of 3" in out.stdout


def test_early_stop_cancels_the_laggard(srv):
    body = {"name": "es", "base": base_spec(steps=100000, eval_every=10),
            "axes": {"optimizer.lr": [1e-7, 0.05]},
            "target": {"metric": "val/accuracy", "value": 0.999},
            "early_stop": {"rule": "median", "after_steps": 20}}
    r = srv.post("/v1/sweeps", srv.alice, body)
    assert r.status_code == 201, r.text
    sid = r.json()["id"]
    try:
        s = wait_sweep(srv, sid, lambda x: x["children"][0]["state"] in FINAL, timeout=90)
    finally:
        srv.post(f"/v1/sweeps/{sid}/cancel", srv.alice)
    slow, fast = s["children"]
    assert slow["state"] == "CANCELLED" and slow["reason"] == "early-stopped", slow
    assert slow["step"] >= 20
    done = wait_sweep(srv, sid, lambda x: x["state"] in FINAL)
    assert done["early_stopped"] == 1
    assert done["children"][1]["reason"] != "early-stopped"
    events = srv.events(slow["job"], srv.alice)
    assert events[-1]["to"] == "CANCELLED" and events[-1]["reason"] == "early-stopped"


def sweeps_count(srv):
    r = srv.get("/v1/sweeps?limit=200", srv.admin)
    assert r.status_code == 200
    return len(r.json()["sweeps"])


def study(**over):
    body = {"kind": "batch_scaling", "name": "bad", "base": base_spec(),
            "batch_sizes": [128, 256, 512], "target": TARGET}
    body.update(over)
    return {k: v for k, v in body.items() if v is not None}


@pytest.mark.parametrize("body, field, words", [
    (study(kind="scaling"), "kind", "batch_scaling"),
    (study(batch_sizes=[256]), "batch_sizes", "2 to"),
    (study(batch_sizes=None), "batch_sizes", "required"),
    (study(batch_sizes=[128, 256, 128]), "batch_sizes", "twice"),
    (study(batch_sizes=[128, 256.5]), "batch_sizes", "integer"),
    (study(batch_sizes=[128, "256"]), "batch_sizes", "integer"),
    (study(batch_sizes=[0, 256]), "batch_sizes", "integer"),
    (study(batch_sizes=128), "batch_sizes", "list"),
    (study(target=None), "target", "required"),
    (study(target={"metric": "train/loss", "value": 0.1}), "target.metric", "val/accuracy"),
    (study(axes={"optimizer.lr": [0.1]}), "axes", "batch_scaling"),
    (study(early_stop={"rule": "median", "after_steps": 5}), "early_stop", "batch_scaling"),
    (study(base=base_spec(eval_every=0)), "base.eval_every", "eval_every"),
    ({"name": "x", "base": base_spec(), "axes": {"seed": [1]}, "batch_sizes": [1, 2]},
     "batch_sizes", "only with kind"),
    # a size the spec rejects: not a multiple of the micro-batch
    (study(base=base_spec(batch={"global": 256, "micro": 128, "reference": 256}),
           batch_sizes=[64, 256, 512]), "batch.global", "child 0 (batch.global=64)"),
])
def test_bad_studies_store_nothing(srv, body, field, words):
    before = sweeps_count(srv)
    r = srv.post("/v1/sweeps", srv.alice, body)
    assert r.status_code == 400, r.text
    err = r.json()["error"]
    assert err["detail"]["field"] == field, err
    assert words in err["message"], err
    assert sweeps_count(srv) == before


@pytest.mark.parametrize("stop, words", [
    ({"metric": "train/loss", "value": 0.1}, 'stop.metric: must be one of "val/accuracy"'),
    ({"metric": "val/accuracy"}, "stop.value"),
    ({"metric": "val/accuracy", "value": 0.9, "mode": "up"}, "stop.mode"),
])
def test_job_stop_target_is_validated(srv, stop, words):
    r = srv.post("/v1/jobs", srv.alice, {"name": "st", **base_spec(stop=stop)})
    assert r.status_code == 400, r.text
    assert words in r.json()["error"]["message"]
