"""Fixtures for the integration tests: run larch-train on specs written by the test."""
import json
import shutil
import subprocess

import pytest

import larchd
# the session's one Slurm cluster (slurm.py): fixtures a test module imported
# itself would be that module's own, a cluster started (and kept) per module
from slurm import slurm_cluster, slurm_nodes, slurm_nodes_session, slurm_session  # noqa: F401


class Trainer:
    def __init__(self, exe, tmp_path):
        self.exe = exe
        self.tmp = tmp_path

    def write_spec(self, spec, name="spec.json"):
        path = self.tmp / name
        path.write_text(json.dumps(spec) if not isinstance(spec, str) else spec)
        return path

    def run(self, spec, job_dir=None, *args, timeout=600):
        """Runs larch-train to the end; returns the CompletedProcess."""
        spec_path = spec if not isinstance(spec, (dict, str)) else self.write_spec(spec)
        cmd = [str(self.exe), "--spec", str(spec_path)]
        if job_dir is not None:
            cmd += ["--job-dir", str(job_dir)]
        return subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def trainer(larch_train, tmp_path):
    return Trainer(larch_train, tmp_path)


@pytest.fixture
def mpirun():
    """Open MPI's launcher, for the multi-rank tests (mpi.py has its environment)."""
    path = shutil.which("mpirun")
    if path is None:
        pytest.fail("mpirun is missing: run deploy/install-deps.sh (openmpi-bin)")
    return path


@pytest.fixture(scope="session", autouse=True)
def no_larchd_left():
    """Kills, at the end of the session, any larchd a test started and did not
    stop (its fixture failed after the start)."""
    yield
    for d in larchd.STARTED:
        if d.running():
            d.proc.kill()
            d.proc.wait()
