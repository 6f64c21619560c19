"""A real single-node Slurm cluster for the integration tests.

`SlurmCluster` drives deploy/slurm/start.sh and stop.sh on one directory
(munged, MariaDB, slurmdbd, slurmctld and slurmd of Debian's packages, run
as root). The
`slurm_cluster` fixture gives one per session: the cluster already up in
$LARCH_SLURM_DIR if there is one (left running at the end), else a fresh one
in a temporary directory on free ports, stopped at the end with nothing of
it left running:

    from slurm import slurm_cluster  # noqa: F401  (the fixture)

    def test_x(slurm_cluster):
        subprocess.run(["sinfo"], env=slurm_cluster.env, check=True)

Accounting is Slurm's own (slurmdbd, AccountingStorageEnforce=associations):
a user submits only under an account of theirs. `add_user(name, account)`
makes both, the Unix user too when this machine has none of that name.

Without the Slurm packages the tests fail and say to run
deploy/install-deps.sh (CI installs them; they are never skipped there);
they are skipped when not running as root, which the daemons need.
"""
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time

import pytest

import unix_users

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "deploy" / "slurm"
COMMANDS = ("munged", "mungekey", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sinfo",
            "sbatch", "squeue", "scontrol", "sacct", "sacctmgr", "sshare")
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}


def require_slurm():
    """Skips unless root; fails (never skips) when the packages are missing."""
    if os.geteuid() != 0:
        pytest.skip("the dev Slurm cluster runs its daemons as root: run the tests as root")
    missing = [c for c in COMMANDS if shutil.which(c) is None]
    if missing:
        pytest.fail(f"Slurm is not installed ({', '.join(missing)} missing): "
                    f"run deploy/install-deps.sh")


def free_ports(n=3):
    """A port p with p .. p+n-1 all free (slurmctld's, slurmd's, slurmdbd's)."""
    for _ in range(100):
        with socket.socket() as a:
            a.bind(("", 0))
            port = a.getsockname()[1]
            if port + n - 1 > 65535:
                continue
            others = []
            try:
                for k in range(1, n):
                    b = socket.socket()
                    others.append(b)
                    b.bind(("", port + k))
            except OSError:
                continue
            finally:
                for b in others:
                    b.close()
            return port
    raise RuntimeError(f"no {n} consecutive free ports")


class SlurmCluster:
    def __init__(self, directory, port=None):
        self.dir = pathlib.Path(directory)
        self.conf = self.dir / "slurm.conf"
        self.script_env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.script_env["LARCH_SLURM_DIR"] = str(self.dir)
        if port is not None:
            self.script_env["LARCH_SLURM_PORT"] = str(port)
        # what the Slurm commands need: the generated config, and no SLURM_*
        # settings of the caller's own (a test run inside a Slurm job)
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
        self.env["SLURM_CONF"] = str(self.conf)

    def script(self, name, timeout=60):
        """Runs deploy/slurm/<name>.sh on this cluster; returns the CompletedProcess."""
        return subprocess.run([str(SCRIPTS / f"{name}.sh")], env=self.script_env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self):
        r = self.script("start")
        if r.returncode != 0:
            self.script("stop")     # what did start
            pytest.fail(f"deploy/slurm/start.sh exited with {r.returncode}:\n{r.stdout}{r.stderr}")
        return self

    def stop(self):
        r = self.script("stop")
        assert r.returncode == 0, f"deploy/slurm/stop.sh exited with {r.returncode}:\n{r.stdout}{r.stderr}"
        return r

    def run(self, *args, timeout=30, check=True):
        """Runs a Slurm command against this cluster; returns the CompletedProcess."""
        r = subprocess.run(list(args), env=self.env, capture_output=True, text=True,
                           timeout=timeout)
        if check:
            assert r.returncode == 0, f"{' '.join(args)} exited with {r.returncode}: {r.stderr}"
        return r

    def sacctmgr(self, *args):
        """sacctmgr -i (no questions) ARGS; returns its stdout."""
        return self.run("sacctmgr", "-i", *args).stdout

    def add_account(self, account, parent="root"):
        """Makes a Slurm account (under parent), unless it exists."""
        if not self.run("sacctmgr", "-nP", "show", "account", account, "format=account").stdout.strip():
            self.sacctmgr("add", "account", account, f"parent={parent}")

    def add_user(self, name, account, default=True):
        """Gives user `name` an association with `account` (made if need
        be), as their default account unless default is False; makes the
        Unix user too (a system user without home or login shell) when
        there is none, since slurmd runs the user's jobs as them, and lets
        other users reach the cluster's directory (o+x on it and the
        directories above: slurmd runs a batch script from its spool as the
        job's user)."""
        unix_users.ensure((name,))
        unix_users.make_reachable(self.dir)
        self.add_account(account)
        have = self.run("sacctmgr", "-nP", "show", "assoc", f"users={name}",
                        f"accounts={account}", "format=account").stdout.split()
        if account not in have:
            extra = [f"defaultaccount={account}"] if default else []
            self.sacctmgr("add", "user", name, f"account={account}", *extra)
        elif default:
            self.sacctmgr("modify", "user", name, "set", f"defaultaccount={account}")

    def pid(self, daemon):
        """The pid in the daemon's pid file, or None."""
        path = self.dir / ("munge/munged.pid" if daemon == "munged" else f"run/{daemon}.pid")
        try:
            return int(path.read_text().strip())
        except (FileNotFoundError, ValueError):
            return None

    def processes(self):
        """{pid: command line} of the live (not zombie) processes of this
        cluster: its daemons (their command lines name its directory) and what
        they started (slurmscriptd, slurmstepd, job processes: their
        environment holds its SLURM_CONF). Leaves out this process and its
        ancestors."""
        mine = set()
        pid = os.getpid()
        while pid > 1:
            mine.add(pid)
            try:
                pid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (FileNotFoundError, IndexError, ValueError):
                break
        needle = str(self.dir) + "/"
        conf = f"SLURM_CONF={self.conf}".encode()
        found = {}
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in mine:
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                environ = (entry / "environ").read_bytes().split(b"\0")
            except (FileNotFoundError, ProcessLookupError, PermissionError, IndexError):
                continue
            if state not in ("Z", "X") and (needle in cmdline or conf in environ):
                found[int(entry.name)] = cmdline.strip()
        return found

    def running(self):
        """Whether all the daemons of this cluster run."""
        alive = self.processes()
        return all(self.pid(d) in alive for d in DAEMONS)

    def submit(self, script, *args):
        """sbatch --parsable; returns the job id."""
        r = self.run("sbatch", "--parsable", *args, str(script))
        return int(r.stdout.strip().split(";")[0])

    def job(self, job_id):
        """`scontrol -o show job` as a dict (one job, 22.05 has no --json)."""
        r = self.run("scontrol", "-o", "show", "job", str(job_id))
        return dict(re.findall(r"(\w+)=(\S*)", r.stdout))

    def wait_job(self, job_id, timeout=30):
        """Polls until the job is in a final state; returns its fields."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in FINAL:
                return job
            assert time.monotonic() < deadline, \
                f"job {job_id} is {job.get('JobState')} after {timeout}s: {job}\n{self.log_tails()}"
            time.sleep(0.1)

    def log_tails(self, lines=15):
        out = []
        for name in DAEMONS:
            path = self.dir / "log" / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(out)


def fresh_cluster(directory):
    """A cluster started in an empty directory on free ports."""
    return SlurmCluster(directory, port=free_ports()).start()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A running cluster: the one in $LARCH_SLURM_DIR if it is up (left
    running), else a new one in a temporary directory, stopped at the end."""
    require_slurm()
    given = os.environ.get("LARCH_SLURM_DIR")
    if given:
        cluster = SlurmCluster(pathlib.Path(given).resolve())
        if cluster.running():
            for name in unix_users.TEST_USERS:
                cluster.add_user(name, "larch-test")
            yield cluster
            return
    cluster = fresh_cluster(tmp_path_factory.mktemp("slurm"))
    # larchd as root submits each job as its owner: the test users need
    # associations (AccountingStorageEnforce=associations)
    for name in unix_users.TEST_USERS:
        cluster.add_user(name, "larch-test")
    yield cluster
    cluster.stop()
    left = cluster.processes()
    assert not left, f"processes of the cluster in {cluster.dir} left after stop.sh: {left}"
