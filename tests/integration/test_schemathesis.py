"""schemathesis against a real larchd's own /v1/openapi.json: every operation
is driven with generated requests (valid and invalid, a bounded number of
examples each, a fixed seed) and its answers are checked against the
document: no 5xx, only documented status codes and content types, bodies
that match the response schemas.

Jobs are real rows, but the trainer larchd runs is /bin/false, so the jobs
the fuzzer submits fail at once instead of training. The path parameter
`id` is pinned to a job that exists (schemathesis would otherwise only see
404s for the per-job operations); other ids come from the links it infers
from POST /v1/jobs."""
import pathlib
import re
import shutil
import sqlite3
import subprocess
import sys
import time

import pytest
import requests

from larchd import Larchd

CHECKS = ("not_a_server_error,status_code_conformance,content_type_conformance,"
          "response_schema_conformance")
SPEC = {"name": "fuzz-seed", "model": {"type": "mlp", "hidden": [8]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 10}


def schemathesis_exe():
    """schemathesis beside the running python (install-deps.sh's .venv)."""
    exe = pathlib.Path(sys.executable).parent / "schemathesis"
    if exe.exists():
        return str(exe)
    found = shutil.which("schemathesis")
    if not found:
        pytest.fail("schemathesis is not installed: run deploy/install-deps.sh "
                    "(it makes .venv with it) and run the tests with .venv/bin/python")
    return found


def test_openapi_conformance(tmp_path):
    false = shutil.which("false")
    server = Larchd(tmp_path, args=["--trainer-path", false, "--max-local-jobs", "1"]).start()
    try:
        auth = server.auth()
        r = requests.post(server.url + "/v1/jobs", json=SPEC, headers=auth, timeout=10)
        assert r.status_code == 201, r.text
        job = r.json()["id"]
        deadline = time.monotonic() + 20
        while requests.get(f"{server.url}/v1/jobs/{job}", headers=auth,
                           timeout=10).json()["state"] != "FAILED":
            assert time.monotonic() < deadline, "the seed job did not fail with /bin/false"
            time.sleep(0.05)

        config = tmp_path / "schemathesis.toml"
        config.write_text(f'[parameters]\n"path.id" = "{job}"\n')
        cmd = [schemathesis_exe(), "--config-file", str(config), "run",
               server.url + "/v1/openapi.json",
               "-H", f"Authorization: {auth['Authorization']}",
               "--checks", CHECKS, "--max-examples", "25", "--seed", "1", "--workers", "1",
               "--no-color", "--generation-database", "none",
               # a valid long poll waits its timeout (up to 60 s) each example:
               # tests/integration/test_events.py covers it
               "--exclude-path", "/v1/events"]
        run = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=tmp_path)
        out = run.stdout + run.stderr
        assert run.returncode == 0, out[-6000:]
        assert re.search(r"\d+ generated, \d+ passed", out), out[-3000:]

        # still serving, no 5xx logged, the database intact
        assert requests.get(server.url + "/healthz", timeout=10).status_code == 200
        assert not re.search(r" (GET|POST|HEAD|PUT|DELETE|PATCH|OPTIONS) \S+ 5\d\d ",
                             server.log()), server.log()[-3000:]
    finally:
        server.stop()
    db = sqlite3.connect(server.state_dir / "larch.db")
    try:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    finally:
        db.close()
