"""Server-side exports: POST /v1/jobs/{id}/exports, GET .../exports[/{export}
[/{file}]] and `larch export JOB_ID`, against a real larchd running real
larch-train jobs.

alice's tiny GPT (1 layer, dim 16, seq 8, vocab 50; checkpoints at steps 2
and 4) and tiny MLP (synthetic 8x8 images) are trained once for the module.
larchd exports their checkpoints as alice (run_as owner, as root) into the
job directories; the files it serves must be byte for byte what
`larch-train --export` writes for the same checkpoint here. Bad requests
(wrong types, unknown fields and formats, steps without a checkpoint, a
pruned file, a job without checkpoints, a format the model does not fit,
another user's job) are refused with the status and field each names, and
make nothing. The file route is the checkpoint route's code: symbolic links
and files the user does not own are refused, HEAD, Range and If-Range work.
"""
import hashlib
import json
import os
import shutil
import struct
import subprocess
import time

import numpy as np
import pytest
import requests

import unix_users
from datasets import write_image_set, write_tokens_u16
from larchd import BUILD, Larchd

JSON = {"Content-Type": "application/json"}
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
ROOT = os.geteuid() == 0
TRAINER = BUILD / "trainer" / "larch-train"


def sha(b):
    return hashlib.sha256(b).hexdigest()


class Server:
    def __init__(self, tmp, state_dir=None):
        self.tmp = tmp
        self.d = Larchd(tmp, state_dir=state_dir).start()
        self.url = self.d.url
        self.admin = self.d.auth()
        self.owner = "alice" if ROOT else None

    def token(self, name):
        return self.d.user_token(name)

    def auth(self, name=None):
        return self.d.auth(self.token(name)) if name else self.admin

    def submit(self, s):
        r = requests.post(self.url + "/v1/jobs", headers={**self.auth(self.owner), **JSON},
                          json=s, timeout=30)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    def wait(self, job, timeout=120):
        deadline = time.monotonic() + timeout
        while True:
            j = requests.get(f"{self.url}/v1/jobs/{job}", headers=self.admin, timeout=10).json()
            if j["state"] in FINAL:
                return j
            assert time.monotonic() < deadline, f"{job} still {j['state']}"
            time.sleep(0.1)

    def post(self, job, body, who="owner", raw=None):
        who = self.owner if who == "owner" else who
        return requests.post(f"{self.url}/v1/jobs/{job}/exports",
                             headers={**self.auth(who), **JSON},
                             data=raw if raw is not None else json.dumps(body), timeout=30)

    def get(self, path, who="owner", headers=None, method="GET"):
        who = self.owner if who == "owner" else who
        return requests.request(method, f"{self.url}/v1/jobs/{path}",
                                headers={**self.auth(who), **(headers or {})}, timeout=30)

    def export(self, job, body, timeout=60):
        """POSTs an export and waits for it to end; the export object."""
        r = self.post(job, body)
        assert r.status_code in (200, 202), r.text
        x = r.json()
        assert r.headers["Location"] == f"/v1/jobs/{job}/exports/{x['id']}"
        deadline = time.monotonic() + timeout
        while x["state"] in ("queued", "running"):
            assert time.monotonic() < deadline, x
            time.sleep(0.05)
            r = self.get(f"{job}/exports/{x['id']}")
            assert r.status_code == 200, r.text
            x = r.json()
        return x

    def job_dir(self, job):
        return self.d.state_dir / "jobs" / job


def gpt_spec(d, **extra):
    return {"name": "gpt", "model": {"type": "gpt", "layers": 1, "heads": 2, "dim": 16, "seq": 8,
                                     "vocab": 50},
            "data": {"format": "tokens_u16", "train": str(d / "tokens.bin")},
            "batch": {"global": 2}, "optimizer": {"type": "adamw", "lr": 1e-2}, "steps": 4,
            "checkpoint_every": 2, "log_every": 2, "seed": 5, **extra}


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("exports")
    server = Server(tmp)
    data = tmp / "data"
    data.mkdir()
    write_tokens_u16(data / "tokens.bin", np.arange(4096) % 50)
    server.mlp_data = write_image_set(data, n_train=64, n_val=16, side=8, classes=4)
    for f in data.iterdir():
        f.chmod(0o644)
    data.chmod(0o755)
    server.data = data
    yield server
    server.d.stop()


@pytest.fixture(scope="module")
def gpt(srv):
    jid = srv.submit(gpt_spec(srv.data))
    assert srv.wait(jid)["state"] == "COMPLETED"
    return jid


@pytest.fixture(scope="module")
def mlp(srv):
    jid = srv.submit({"name": "mlp", "model": {"type": "mlp", "hidden": [8]},
                      "data": srv.mlp_data, "batch": {"global": 16},
                      "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 2})
    assert srv.wait(jid)["state"] == "COMPLETED"
    return jid


def checkpoints(srv, job):
    r = srv.get(f"{job}/checkpoints", who=None)
    assert r.status_code == 200, r.text
    return r.json()["checkpoints"]


def local_export(srv, job, step, fmt, out):
    """What larch-train --export writes here for the same checkpoint."""
    ckpt = srv.job_dir(job) / "checkpoints" / f"step-{step:08d}.safetensors"
    run = subprocess.run([str(TRAINER), "--export", str(ckpt), "--format", fmt, "-o", str(out)],
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stderr
    return out


def download_all(srv, job, x):
    files = {}
    for f in x["files"]:
        r = srv.get(f"{job}/exports/{x['id']}/{f['name']}")
        assert r.status_code == 200, r.text
        assert r.headers["ETag"] == f'"{f["sha256"]}"'
        assert int(r.headers["Content-Length"]) == f["bytes"] == len(r.content)
        assert sha(r.content) == f["sha256"]
        assert f["url"] == f"/v1/jobs/{job}/exports/{x['id']}/{f['name']}"
        files[f["name"]] = r.content
    return files


def test_gpt_export_is_what_larch_train_writes(srv, gpt, tmp_path):
    r = srv.post(gpt, {"step": 2, "format": "hf-gpt2"})
    assert r.status_code == 202, r.text
    x = r.json()
    assert (x["id"], x["job"], x["step"], x["format"]) == ("2-hf-gpt2", gpt, 2, "hf-gpt2")
    assert x["state"] in ("queued", "running", "done") and x["error"] is None
    x = srv.export(gpt, {"step": 2, "format": "hf-gpt2"})
    assert x["state"] == "done", x
    assert x["checkpoint_sha256"] == checkpoints(srv, gpt)[0]["sha256"]
    assert [f["name"] for f in x["files"]] == ["config.json", "model.safetensors"]
    got = download_all(srv, gpt, x)
    want = local_export(srv, gpt, 2, "hf-gpt2", tmp_path / "local")
    for name, data in got.items():
        assert data == (want / name).read_bytes(), name
    assert json.loads(got["config.json"])["model_type"] == "gpt2"
    # written into the job's directory, as the job's user
    out = srv.job_dir(gpt) / "exports" / "2-hf-gpt2"
    assert (out / "model.safetensors").read_bytes() == got["model.safetensors"]
    if ROOT:
        for name in ("config.json", "model.safetensors", "export.json"):
            assert (out / name).stat().st_uid == unix_users.uid(srv.owner), name
    # the same export again: answered as it is, not made again
    r = srv.post(gpt, {"step": 2, "format": "hf-gpt2"})
    assert r.status_code == 200 and r.json() == x, r.text
    # nothing asked: the newest checkpoint in the model's format
    y = srv.export(gpt, {})
    assert (y["id"], y["state"]) == ("4-hf-gpt2", "done"), y
    r = srv.get(f"{gpt}/exports")
    assert r.status_code == 200, r.text
    assert [e["id"] for e in r.json()["exports"]] == ["2-hf-gpt2", "4-hf-gpt2"]
    assert r.json()["exports"][0] == x
    # admins see it too; another user does not see the job
    assert srv.get(f"{gpt}/exports", who=None).json() == r.json()
    if ROOT:
        for path in ("exports", "exports/2-hf-gpt2", "exports/2-hf-gpt2/config.json"):
            r = srv.get(f"{gpt}/{path}", who="bob")
            assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", path
        r = srv.post(gpt, {}, who="bob")
        assert r.status_code == 404, r.text


def test_mlp_export(srv, mlp, tmp_path):
    x = srv.export(mlp, {"format": "hf-mlp"})
    assert (x["id"], x["state"]) == ("2-hf-mlp", "done"), x
    got = download_all(srv, mlp, x)
    want = local_export(srv, mlp, 2, "hf-mlp", tmp_path / "local")
    for name, data in got.items():
        assert data == (want / name).read_bytes(), name


@pytest.fixture(scope="module")
def no_ckpt(srv):
    """A job that fails at once, before its first checkpoint: the image file
    stops after 10 of the 300 images its header promises."""
    d = srv.data
    images, labels = d / "short-images", d / "short-labels"
    images.write_bytes(struct.pack(">IIII", 0x803, 300, 28, 28) + bytes(10 * 28 * 28))
    labels.write_bytes(struct.pack(">II", 0x801, 300) + bytes(i % 10 for i in range(300)))
    for f in (images, labels):
        f.chmod(0o644)
    jid = srv.submit({"name": "fails", "model": {"type": "mlp", "hidden": [8]},
                      "data": {"format": "idx", "train": {"images": str(images),
                                                          "labels": str(labels)}},
                      "batch": {"global": 30}, "optimizer": {"type": "sgd", "lr": 0.1},
                      "steps": 5})
    assert srv.wait(jid)["state"] == "FAILED"
    assert checkpoints(srv, jid) == []
    return jid


BAD = [
    # body, status, error code, detail field, words in the message
    ({"format": "onnx"}, 400, "bad_request", "format", "unknown format"),
    ({"format": 7}, 400, "bad_request", "format", "unknown format"),
    ({"format": "HF-GPT2"}, 400, "bad_request", "format", "unknown format"),
    ({"format": "hf-gpt2\u0000x"}, 400, "bad_json", None, "not allowed"),
    ({"format": None}, 400, "bad_request", "format", "unknown format"),
    ({"step": "4"}, 400, "bad_request", "step", "integer"),
    ({"step": 2.0}, 400, "bad_request", "step", "integer"),
    ({"step": True}, 400, "bad_request", "step", "integer"),
    ({"step": -2}, 400, "bad_request", "step", "integer"),
    ({"step": None}, 400, "bad_request", "step", "integer"),
    ({"step": 2**60}, 400, "bad_request", "step", "integer"),
    ({"step": 2, "path": "/etc"}, 400, "bad_request", "path", "unknown field"),
    ({"step": 2, "out": "../../x"}, 400, "bad_request", "out", "unknown field"),
    ([2, "hf-gpt2"], 400, "bad_request", "", "must be an object"),
    ("hf-gpt2", 400, "bad_request", "", "must be an object"),
    ({"step": 3}, 422, "infeasible", "step", "no checkpoint of step 3"),
    ({"step": 5, "format": "hf-gpt2"}, 422, "infeasible", "step", "no checkpoint of step 5"),
    ({"format": "hf-mlp"}, 422, "infeasible", "format", "does not fit"),
]


@pytest.mark.parametrize("body,status,code,field,words", BAD,
                         ids=[json.dumps(b[0]) for b in BAD])
def test_bad_requests_are_refused_and_make_nothing(srv, gpt, body, status, code, field, words):
    before = sorted(os.listdir(srv.job_dir(gpt) / "exports")) \
        if (srv.job_dir(gpt) / "exports").exists() else []
    r = srv.post(gpt, body)
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert err["code"] == code and words in err["message"], err
    assert (err["detail"] or {}).get("field") == field, err
    after = sorted(os.listdir(srv.job_dir(gpt) / "exports")) \
        if (srv.job_dir(gpt) / "exports").exists() else []
    assert after == before


def test_malformed_and_missing(srv, gpt, mlp, no_ckpt):
    r = srv.post(gpt, None, raw="{\"step\": 2,")
    assert r.status_code == 400 and r.json()["error"]["code"] == "bad_json", r.text
    r = srv.post(mlp, {"format": "hf-gpt2"})
    assert r.status_code == 422 and "an mlp model" in r.json()["error"]["message"], r.text
    r = srv.post(no_ckpt, {})
    assert r.status_code == 409 and "no checkpoint yet" in r.json()["error"]["message"], r.text
    r = srv.post("j-999999", {})
    assert r.status_code == 404, r.text
    r = requests.post(f"{srv.url}/v1/jobs/{gpt}/exports?step=2", headers={
        **srv.auth(srv.owner), **JSON}, data="{}", timeout=10)
    assert r.status_code == 400, r.text
    # names that are not an export of the job
    for name in ("3-hf-gpt2", "02-hf-gpt2", "2-hf-gpt2x", "2-onnx", "2", "hf-gpt2",
                 "2-hf-gpt2.", "-2-hf-gpt2"):
        r = srv.get(f"{gpt}/exports/{name}")
        assert r.status_code == 404, (name, r.text)
    assert srv.get(f"{no_ckpt}/exports").json() == {"exports": []}


@pytest.fixture
def spare(srv):
    """A GPT job of alice's to damage (the shared one stays whole)."""
    jid = srv.submit(gpt_spec(srv.data, steps=2, name="spare"))
    assert srv.wait(jid)["state"] == "COMPLETED"
    return jid


def test_pruned_checkpoint_and_a_failed_export(srv, spare):
    ck = srv.job_dir(spare) / "checkpoints" / "step-00000002.safetensors"
    spec = srv.job_dir(spare) / "spec.json"
    text = spec.read_text()
    # a spec.json that is not the one the checkpoint was written by: the
    # handler's checks pass, larch-train refuses, the export fails with why
    spec.write_text(text.replace('"seed":5', '"seed":6').replace('"seed": 5', '"seed": 6'))
    assert spec.read_text() != text
    x = srv.export(spare, {"step": 2})
    assert x["state"] == "failed" and x["files"] == [], x
    assert "larch-train --export exited" in x["error"] and "hash" in x["error"], x
    r = srv.get(f"{spare}/exports/{x['id']}/config.json")
    assert r.status_code == 409 and "failed" in r.json()["error"]["message"], r.text
    # put back: POST makes it again
    spec.write_text(text)
    y = srv.export(spare, {"step": 2})
    assert y["state"] == "done" and y["error"] is None, y
    # the checkpoint's file gone (pruned): 409, nothing started
    ck.unlink()
    r = srv.post(spare, {"step": 2, "format": "hf-gpt2"})
    # the export of this checkpoint is done already: answered as it is
    assert r.status_code == 200, r.text
    shutil.rmtree(srv.job_dir(spare) / "exports" / "2-hf-gpt2")
    r = srv.post(spare, {"step": 2, "format": "hf-gpt2"})
    assert r.status_code == 409 and "gone" in r.json()["error"]["message"], r.text


def test_file_route_http(srv, gpt):
    x = srv.export(gpt, {"step": 4})
    base = f"{gpt}/exports/{x['id']}/model.safetensors"
    whole = srv.get(base)
    assert whole.status_code == 200
    etag, size = whole.headers["ETag"], len(whole.content)
    assert whole.headers["Content-Type"] == "application/octet-stream"
    assert 'filename="model.safetensors"' in whole.headers["Content-Disposition"]
    assert srv.get(f"{gpt}/exports/{x['id']}/config.json").headers["Content-Type"] == \
        "application/json"
    # HEAD: GET's headers, no body
    h = srv.get(base, method="HEAD")
    assert h.status_code == 200 and h.content == b""
    for k in ("ETag", "Content-Length", "Content-Type", "Accept-Ranges"):
        assert h.headers[k] == whole.headers[k], k
    r = srv.get(base, headers={"Range": "bytes=8-99"})
    assert r.status_code == 206 and r.content == whole.content[8:100]
    assert r.headers["Content-Range"] == f"bytes 8-99/{size}"
    r = srv.get(base, headers={"Range": "bytes=8-99", "If-Range": etag})
    assert r.status_code == 206 and r.content == whole.content[8:100]
    for stale in ('"' + "0" * 64 + '"', "W/" + etag, "Tue, 01 Dec 2026 00:00:00 GMT"):
        r = srv.get(base, headers={"Range": "bytes=8-99", "If-Range": stale})
        assert r.status_code == 200 and r.content == whole.content, stale
    r = srv.get(base, headers={"If-None-Match": etag})
    assert r.status_code == 304 and r.content == b""
    r = srv.get(base, headers={"Range": f"bytes={size}-"})
    assert r.status_code == 416 and r.headers["Content-Range"] == f"bytes */{size}"
    # only the export's own files
    for name in ("export.json", "spec.json", "model.bin", "..", "%2e%2e", "%2Fetc%2Fpasswd"):
        r = srv.get(f"{gpt}/exports/{x['id']}/{name}")
        assert r.status_code == 404, (name, r.text)


def test_swapped_files_are_refused(srv, spare, tmp_path):
    x = srv.export(spare, {"step": 2})
    assert x["state"] == "done", x
    out = srv.job_dir(spare) / "exports" / x["id"]
    path = out / "model.safetensors"
    data = path.read_bytes()
    # a link to a copy with the right bytes: refused for being a link
    copy = tmp_path / "copy"
    copy.write_bytes(data)
    path.unlink()
    path.symlink_to(copy)
    r = srv.get(f"{spare}/exports/{x['id']}/model.safetensors")
    assert r.status_code == 409 and "symbolic link" in r.json()["error"]["message"], r.text
    path.unlink()
    path.symlink_to("/etc/shadow")
    r = srv.get(f"{spare}/exports/{x['id']}/model.safetensors")
    assert r.status_code == 409 and "root:" not in r.text, r.text
    # the bytes changed: the manifest's sha256 refuses them
    path.unlink()
    path.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    if ROOT:
        os.chown(path, unix_users.uid(srv.owner), -1)
    r = srv.get(f"{spare}/exports/{x['id']}/model.safetensors")
    assert r.status_code == 409 and "sha256" in r.json()["error"]["message"], r.text
    if ROOT:
        # a file of bob's with the right bytes
        path.unlink()
        path.write_bytes(data)
        os.chown(path, unix_users.uid("bob"), -1)
        r = srv.get(f"{spare}/exports/{x['id']}/model.safetensors")
        assert r.status_code == 409 and "does not belong" in r.json()["error"]["message"]
    # a forged manifest naming other files is not read as an export
    (out / "export.json").write_text(json.dumps({
        "id": x["id"], "step": 2, "format": "hf-gpt2", "checkpoint_sha256": "0" * 64,
        "files": [{"name": "../../spec.json", "bytes": 1, "sha256": "0" * 64},
                  {"name": "model.safetensors", "bytes": 1, "sha256": "0" * 64}]}))
    assert srv.get(f"{spare}/exports").json() == {"exports": []}


def larch(srv, *args, cwd):
    env = dict(os.environ, LARCH_URL=srv.url,
               LARCH_TOKEN=srv.token(srv.owner) if srv.owner else srv.d.admin_token)
    return subprocess.run([str(BUILD / "service" / "larch"), *map(str, args)],
                          capture_output=True, text=True, timeout=120, env=env, cwd=cwd)


def test_cli_export_by_job_id(srv, gpt, tmp_path):
    want = local_export(srv, gpt, 4, "hf-gpt2", tmp_path / "local")
    out = larch(srv, "export", gpt, "-o", "hf", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    for name in ("config.json", "model.safetensors"):
        assert (tmp_path / "hf" / name).read_bytes() == (want / name).read_bytes(), name
    assert not list((tmp_path / "hf").glob("*.part"))
    # the bare number, a step and a format
    want2 = local_export(srv, gpt, 2, "hf-gpt2", tmp_path / "local2")
    num = str(int(gpt[2:]))
    out = larch(srv, "export", num, "--step", "2", "--format", "hf-gpt2", "-o", "hf2",
                cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "hf2" / "model.safetensors").read_bytes() == \
        (want2 / "model.safetensors").read_bytes()
    # refusals come back as larchd's messages, exit 1
    out = larch(srv, "export", gpt, "--step", "3", "-o", "x", cwd=tmp_path)
    assert out.returncode == 1 and "no checkpoint of step 3" in out.stderr, out.stderr
    out = larch(srv, "export", gpt, "--format", "hf-mlp", "-o", "x", cwd=tmp_path)
    assert out.returncode == 1 and "does not fit" in out.stderr, out.stderr
    out = larch(srv, "export", gpt, cwd=tmp_path)
    assert out.returncode == 2 and "-o DIR" in out.stderr, out.stderr
    assert not (tmp_path / "x").exists()


def test_exports_survive_a_restart(srv, gpt, tmp_path):
    x = srv.export(gpt, {"step": 2})
    srv.d.stop()
    srv.d = Larchd(srv.tmp, state_dir=srv.d.state_dir).start()
    srv.url = srv.d.url
    r = srv.get(f"{gpt}/exports/{x['id']}")
    assert r.status_code == 200 and r.json() == x, r.text
    assert sha(srv.get(f"{gpt}/exports/{x['id']}/model.safetensors").content) == \
        x["files"][1]["sha256"]
