"""Checkpoints out: GET /v1/jobs/{id}/checkpoints/{step} and `larch
checkpoint ls|download` against a real larchd and real larch-train jobs.

One tiny job of alice's (two checkpoints) and one 2-rank ZeRO-1 job are
trained once for the module. The tests download them whole and in ranges
(HEAD and If-Range too),
as another user, with the file corrupted, swapped for a symbolic link or
for a file the job's user does not own, and with the CLI (fresh, resumed
from a cut .part, and a .part of wrong bytes). Run as root, the jobs run as
their owners (run_as owner), as in production.
"""
import hashlib
import json
import os
import pathlib
import re
import shutil
import struct
import subprocess
import time

import pytest
import requests
import urllib3

import unix_users
from larchd import BUILD, Larchd
from mpi import mpi_env

JSON = {"Content-Type": "application/json"}
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}
ROOT = os.geteuid() == 0


def spec(name, steps=10, **extra):
    return {"name": name, "model": {"type": "mlp", "hidden": [16]},
            "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
            "optimizer": {"type": "adamw", "lr": 1e-3}, "steps": steps,
            "checkpoint_every": 5, "log_every": 5, **extra}


class Server:
    def __init__(self, tmp):
        self.tmp = tmp
        self.d = Larchd(tmp, env=mpi_env()).start()
        self.url = self.d.url
        self.admin = self.d.auth()

    def token(self, name):
        return self.d.user_token(name)

    def auth(self, name=None):
        return self.d.auth(self.token(name)) if name else self.admin

    def submit(self, who, s):
        r = requests.post(self.url + "/v1/jobs", headers={**self.auth(who), **JSON}, json=s,
                          timeout=30)
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

    def checkpoints(self, job):
        r = requests.get(f"{self.url}/v1/jobs/{job}/checkpoints", headers=self.admin, timeout=10)
        assert r.status_code == 200, r.text
        return r.json()["checkpoints"]

    def get(self, job, step, who=None, headers=None, stream=False):
        return requests.get(f"{self.url}/v1/jobs/{job}/checkpoints/{step}",
                            headers={**self.auth(who), **(headers or {})}, timeout=30,
                            stream=stream)


@pytest.fixture(scope="module")
def srv(tmp_path_factory):
    server = Server(tmp_path_factory.mktemp("ckptdl"))
    server.owner = "alice" if ROOT else None
    yield server
    server.d.stop()


@pytest.fixture(scope="module")
def job(srv):
    """alice's job: checkpoints at steps 5 and 10."""
    jid = srv.submit(srv.owner, spec("ckpt"))
    assert srv.wait(jid)["state"] == "COMPLETED"
    cks = srv.checkpoints(jid)
    assert [c["step"] for c in cks] == [5, 10], cks
    return jid


def sha(b):
    return hashlib.sha256(b).hexdigest()


def safetensors_header(data):
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n])


def test_full_download_matches_the_recorded_sha256(srv, job):
    for ck in srv.checkpoints(job):
        r = srv.get(job, ck["step"], srv.owner)
        assert r.status_code == 200, r.text
        assert r.headers["Content-Type"] == "application/octet-stream"
        assert int(r.headers["Content-Length"]) == ck["bytes"] == len(r.content)
        assert sha(r.content) == ck["sha256"]
        assert r.headers["ETag"] == f'"{ck["sha256"]}"'
        assert r.headers["Accept-Ranges"] == "bytes"
        assert safetensors_header(r.content)["__metadata__"]["step"] == str(ck["step"])
    # the admin too, and If-None-Match is a 304
    r = srv.get(job, 10)
    assert r.status_code == 200 and sha(r.content) == srv.checkpoints(job)[-1]["sha256"]
    r = srv.get(job, 10, srv.owner, {"If-None-Match": r.headers["ETag"]})
    assert r.status_code == 304 and r.content == b""


def test_ranges(srv, job):
    ck = srv.checkpoints(job)[-1]
    whole = srv.get(job, 10).content
    size = len(whole)
    r = srv.get(job, 10, srv.owner, {"Range": "bytes=8-99"})
    assert r.status_code == 206, r.text
    assert r.content == whole[8:100]
    assert r.headers["Content-Range"] == f"bytes 8-99/{size}"
    assert r.headers["ETag"] == f'"{ck["sha256"]}"'
    r = srv.get(job, 10, srv.owner, {"Range": f"bytes={size - 10}-"})
    assert r.status_code == 206 and r.content == whole[-10:]
    r = srv.get(job, 10, srv.owner, {"Range": "bytes=-16"})
    assert r.status_code == 206 and r.content == whole[-16:]
    r = srv.get(job, 10, srv.owner, {"Range": f"bytes=0-{size * 4}"})
    assert r.status_code == 206 and r.content == whole
    for bad in (f"bytes={size}-", f"bytes={size + 100}-{size + 200}", "bytes=-0"):
        r = srv.get(job, 10, srv.owner, {"Range": bad})
        assert r.status_code == 416, (bad, r.status_code, r.text)
        assert r.headers["Content-Range"] == f"bytes */{size}"
        assert r.json()["error"]["code"] == "range_not_satisfiable"
    # several ranges, or nonsense: the whole file
    for ignored in ("bytes=0-1,4-5", "lines=1-2", "bytes=9-3"):
        r = srv.get(job, 10, srv.owner, {"Range": ignored})
        assert r.status_code == 200 and r.content == whole, ignored


def test_head_and_if_range(srv, job):
    whole = srv.get(job, 10)
    etag, size = whole.headers["ETag"], len(whole.content)
    # HEAD: GET's status and headers, no body
    h = requests.head(f"{srv.url}/v1/jobs/{job}/checkpoints/10", headers=srv.auth(srv.owner),
                      timeout=30)
    assert h.status_code == 200 and h.content == b"", h.headers
    for k in ("ETag", "Content-Length", "Content-Type", "Accept-Ranges", "Content-Disposition"):
        assert h.headers[k] == whole.headers[k], k
    h = requests.head(f"{srv.url}/v1/jobs/{job}/checkpoints/10",
                      headers={**srv.auth(srv.owner), "Range": "bytes=8-99"}, timeout=30)
    assert h.status_code == 206 and h.content == b""
    assert h.headers["Content-Range"] == f"bytes 8-99/{size}"
    assert h.headers["Content-Length"] == "92"
    h = requests.head(f"{srv.url}/v1/jobs/{job}/checkpoints/7", headers=srv.auth(srv.owner),
                      timeout=30)
    assert h.status_code == 404 and h.content == b""
    # If-Range: the range while the ETag is the file's, else the whole file
    r = srv.get(job, 10, srv.owner, {"Range": "bytes=8-99", "If-Range": etag})
    assert r.status_code == 206 and r.content == whole.content[8:100]
    for stale in ('"' + "0" * 64 + '"', "W/" + etag, etag[:-2] + '"',
                  "Mon, 07 Dec 2026 00:00:00 GMT", ""):
        r = srv.get(job, 10, srv.owner, {"Range": "bytes=8-99", "If-Range": stale})
        assert r.status_code == 200 and r.content == whole.content, stale
        assert "Content-Range" not in r.headers
    # a range past the end under a stale If-Range: the whole file, not a 416
    r = srv.get(job, 10, srv.owner, {"Range": f"bytes={size}-", "If-Range": '"x"'})
    assert r.status_code == 200 and len(r.content) == size


@pytest.mark.skipif(not ROOT, reason="other users' jobs need larchd as root")
def test_another_users_job_and_missing_steps_are_404(srv, job):
    r = srv.get(job, 10, "bob")
    assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
    assert job in r.json()["error"]["message"] or "not found" in r.json()["error"]["message"]
    for step in (7, 11, "abc", "-1"):
        r = srv.get(job, step, srv.owner)
        assert r.status_code == 404, (step, r.text)
    r = srv.get("j-999999", 10)
    assert r.status_code == 404


def job_file(srv, job, step):
    return srv.d.state_dir / "jobs" / job / "checkpoints" / f"step-{step:08d}.safetensors"


def as_owner(path, srv):
    """Gives path to the job's user, as the trainer would have written it."""
    if ROOT:
        os.chown(path, unix_users.uid(srv.owner), -1, follow_symlinks=False)


@pytest.fixture
def spare(srv):
    """A second job of alice's to damage (the shared one stays whole)."""
    jid = srv.submit(srv.owner, spec("spare", steps=5))
    assert srv.wait(jid)["state"] == "COMPLETED"
    return jid


def download_hashes(srv):
    text = requests.get(srv.url + "/metrics", headers=srv.admin, timeout=10).text
    m = re.search(r"^larch_download_hashes_total (\d+)$", text, re.M)
    assert m, text
    return int(m.group(1))


def test_first_download_after_the_job_is_not_hashed_again(srv, spare):
    # the import at the job's end hashed the file: its verdict is known
    ck = srv.checkpoints(spare)[0]
    before = download_hashes(srv)
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 200 and sha(r.content) == ck["sha256"]
    assert download_hashes(srv) == before
    # touched since (same bytes, a new mtime and ctime): hashed once, then known
    path = job_file(srv, spare, 5)
    os.utime(path)
    for _ in range(2):
        r = srv.get(spare, 5, srv.owner)
        assert r.status_code == 200 and sha(r.content) == ck["sha256"]
        assert download_hashes(srv) == before + 1


def test_corrupted_file_is_refused(srv, spare):
    path = job_file(srv, spare, 5)
    good = srv.get(spare, 5, srv.owner)
    assert good.status_code == 200                   # verified and remembered
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF                                 # same size, one bit pattern off
    with open(path, "r+b") as f:
        f.seek(len(data) - 1)
        f.write(data[-1:])
    for headers in ({}, {"Range": "bytes=0-7"}):
        r = srv.get(spare, 5, srv.owner, headers)
        assert r.status_code == 409, r.text
        msg = r.json()["error"]["message"]
        assert "sha256" in msg and "not served" in msg, msg
    # a shorter file: refused on its size, without hashing
    os.truncate(path, len(data) - 8)
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 409 and "bytes" in r.json()["error"]["message"], r.text
    # gone: 404
    path.unlink()
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 404 and "gone" in r.json()["error"]["message"], r.text


def test_a_file_rewritten_while_it_streams_is_cut(srv):
    # a checkpoint of about 22 MB: larchd is far from its end while we wait
    jid = srv.submit(srv.owner, spec("big", steps=1, checkpoint_every=1,
                                     model={"type": "mlp", "hidden": [1024, 1024]}))
    assert srv.wait(jid)["state"] == "COMPLETED"
    ck = srv.checkpoints(jid)[-1]
    size, step = ck["bytes"], ck["step"]
    assert size > 16 << 20, ck
    assert srv.get(jid, step, srv.owner).status_code == 200   # verified: later ones stream at once
    r = srv.get(jid, step, srv.owner, stream=True)
    assert r.status_code == 200 and int(r.headers["Content-Length"]) == size
    n = len(r.raw.read(1 << 20))
    with open(job_file(srv, jid, step), "r+b") as f:   # in place: same inode, same size
        f.seek(size // 2)
        byte = f.read(1)
        f.seek(size // 2)
        f.write(bytes([byte[0] ^ 0xFF]))
    try:
        while chunk := r.raw.read(1 << 20):
            n += len(chunk)
    except (urllib3.exceptions.HTTPError, requests.RequestException):
        pass
    assert n < size, "a file rewritten during the transfer came through whole"
    r = srv.get(jid, step, srv.owner)
    assert r.status_code == 409 and "sha256" in r.json()["error"]["message"], r.text


def test_symlink_swap_is_refused(srv, spare, tmp_path):
    path = job_file(srv, spare, 5)
    recorded = srv.checkpoints(spare)[-1]
    # the link's target has the recorded size and hash: only the link refuses it
    target = tmp_path / "copy.safetensors"
    shutil.copyfile(path, target)
    path.unlink()
    path.symlink_to(target)
    as_owner(path, srv)
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 409 and "symbolic link" in r.json()["error"]["message"], r.text
    path.unlink()
    path.symlink_to("/etc/shadow")
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 409 and "root:" not in r.text, r.text
    # the checkpoints directory itself replaced by a link
    cdir = path.parent
    shutil.move(str(cdir), str(tmp_path / "moved"))
    os.symlink(tmp_path / "moved", cdir)
    (tmp_path / "moved" / path.name).unlink()
    shutil.copyfile(target, tmp_path / "moved" / path.name)
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 409 and "symbolic link" in r.json()["error"]["message"], r.text
    assert sha(target.read_bytes()) == recorded["sha256"]


@pytest.mark.skipif(not ROOT, reason="file owners other than larchd's need root")
def test_file_the_owner_does_not_own_is_refused(srv, spare):
    """A file of bob's (or root's) moved in under the checkpoint's name, with
    the right bytes: larchd, reading as root, must not serve it to alice."""
    path = job_file(srv, spare, 5)
    data = path.read_bytes()
    path.unlink()
    path.write_bytes(data)
    os.chown(path, unix_users.uid("bob"), -1)
    os.chmod(path, 0o600)
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 409 and "does not belong" in r.json()["error"]["message"], r.text
    # a hard link (two links) to a file of the owner's is refused as well
    os.chown(path, unix_users.uid(srv.owner), -1)
    os.link(path, path.with_name("other"))
    r = srv.get(spare, 5, srv.owner)
    assert r.status_code == 409 and "one link" in r.json()["error"]["message"], r.text


def larch(srv, who, *args, cwd):
    env = dict(os.environ, LARCH_URL=srv.url,
               LARCH_TOKEN=srv.token(who) if who else srv.d.admin_token)
    return subprocess.run([str(BUILD / "service" / "larch"), *args], capture_output=True,
                          text=True, timeout=60, env=env, cwd=cwd)


def test_cli_ls_and_download(srv, job, tmp_path):
    out = larch(srv, srv.owner, "checkpoint", "ls", job, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    cks = srv.checkpoints(job)
    for ck in cks:
        assert ck["sha256"] in out.stdout and str(ck["bytes"]) in out.stdout
    # the newest by default, to <id>-step-<N>.safetensors
    out = larch(srv, srv.owner, "checkpoint", "download", job, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    f = tmp_path / f"{job}-step-00000010.safetensors"
    assert sha(f.read_bytes()) == cks[-1]["sha256"]
    assert not (tmp_path / (f.name + ".part")).exists()
    # --step and -o
    out = larch(srv, srv.owner, "checkpoint", "download", job, "--step", "5", "-o", "five.st",
                cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert sha((tmp_path / "five.st").read_bytes()) == cks[0]["sha256"]
    out = larch(srv, srv.owner, "checkpoint", "download", job, "--step", "6", cwd=tmp_path)
    assert out.returncode == 1 and "no checkpoint of step 6" in out.stderr, out.stderr
    if ROOT:
        out = larch(srv, "bob", "checkpoint", "download", job, cwd=tmp_path)
        assert out.returncode == 1 and "not found" in out.stderr, out.stderr


def test_cli_resumes_a_cut_download(srv, job, tmp_path):
    ck = srv.checkpoints(job)[-1]
    whole = srv.get(job, 10).content
    part = tmp_path / "out.st.part"
    part.write_bytes(whole[:len(whole) // 3])        # an interrupted download
    out = larch(srv, srv.owner, "checkpoint", "download", job, "-o", "out.st", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"resuming out.st.part at byte {len(whole) // 3} of {len(whole)}" in out.stderr
    assert sha((tmp_path / "out.st").read_bytes()) == ck["sha256"]
    assert not part.exists()
    # a .part of wrong bytes: resumed, found wrong, kept, exit 1 (an earlier
    # good download of the same name stays as it was)
    out = larch(srv, srv.owner, "checkpoint", "download", job, "-o", "bad.st", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    (tmp_path / "bad.st.part").write_bytes(b"\0" * 100)
    out = larch(srv, srv.owner, "checkpoint", "download", job, "-o", "bad.st", cwd=tmp_path)
    assert out.returncode == 1 and "is not the recorded" in out.stderr, out.stderr
    assert (tmp_path / "bad.st.part").stat().st_size == len(whole)
    assert (tmp_path / "bad.st").read_bytes() == whole     # the earlier one, untouched


def test_zero1_checkpoint_is_the_whole_model(srv, job):
    """A 2-rank ZeRO-1 job's checkpoint, as served, has every tensor whole:
    the same names and shapes as the one-rank job's, and its optimizer
    state for every parameter."""
    if not shutil.which("mpirun"):
        pytest.skip("no mpirun")
    jid = srv.submit(srv.owner, spec("zero1", steps=5,
                                     parallel={"ranks": 2, "zero_stage": 1}))
    j = srv.wait(jid, timeout=180)
    assert j["state"] == "COMPLETED", j
    ck = srv.checkpoints(jid)[-1]
    data = srv.get(jid, ck["step"], srv.owner).content
    assert sha(data) == ck["sha256"]
    zero = safetensors_header(data)
    one = safetensors_header(srv.get(job, 5).content)
    shapes = {k: v["shape"] for k, v in zero.items() if k != "__metadata__"}
    assert shapes == {k: v["shape"] for k, v in one.items() if k != "__metadata__"}
    params = [k for k in shapes if k.startswith("param.")]
    assert params and all(f"optim.m.{k[6:]}" in shapes and f"optim.v.{k[6:]}" in shapes
                          for k in params)
    # the tensors fill the file: nothing is a shard with the rest elsewhere
    n = struct.unpack("<Q", data[:8])[0]
    end = max(v["data_offsets"][1] for k, v in zero.items() if k != "__metadata__")
    assert 8 + n + end == len(data)
