"""A real single-node Slurm cluster for the integration tests.

`SlurmCluster` drives deploy/slurm/start.sh and stop.sh on one directory
(munged, MariaDB, slurmdbd, slurmctld and slurmd of Debian's packages, run
as root). One cluster serves the whole session (`slurm_session`): the
cluster already up in $LARCH_SLURM_DIR if there is one (left running at the
end), else a fresh one in a temporary directory on free ports, stopped at
the end with nothing of it left running. conftest.py provides the fixtures
to every module (a module that imported them itself would get a cluster of
its own); a test asks for `slurm_cluster`:

    def test_x(slurm_cluster):
        subprocess.run(["sinfo"], env=slurm_cluster.env, check=True)

`slurm_cluster` is module-scoped: each module that uses the cluster finds
it clean and leaves it clean, whatever order the modules run in. Clean is:
every daemon up, no job in squeue, the node idle (not drained, down or
still completing a job), every partition up, and Slurm's accounting as it
was at the session's start (each user's default account, the limits of
every association and QOS; associations and accounts a module added may
stay, without limits). Its setup waits for that, at most CLEAN_WAIT_S,
then fails saying what is not; its teardown makes it so: it stops every
larchd still running against the cluster (which could submit again),
cancels every job of every user, resumes a drained or down node, sets the
partitions up, puts the accounting back, and waits as the setup does. A
module therefore leaves nothing for the next one to trip on (a job still
holding the node, which kept the next module's first job pending on
Resources), and a test may change the node, partitions or accounting as
long as it is the cluster's to change. On a cluster of $LARCH_SLURM_DIR
this cancels every job on it.

Accounting is Slurm's own (slurmdbd, AccountingStorageEnforce=associations):
a user submits only under an account of theirs. `add_user(name, account)`
makes both, the Unix user too when this machine has none of that name.

`slurm_nodes` is the same for a second cluster of 3 nodes (start.sh
--nodes 3: each slurmd in a network and UTS namespace of its own, node1 ..
node3), session-scoped too and started only when a test asks for it; at its
end stop.sh must leave none of its processes, namespaces or links
(`leftovers`).

Without the Slurm packages the tests fail and say to run
deploy/install-deps.sh (CI installs them; they are never skipped there);
they are skipped when not running as root, which the daemons need.
"""
import hashlib
import os
import pathlib
import re
import shutil
import socket
import subprocess
import time

import pytest

import larchd
import unix_users

ROOT = pathlib.Path(__file__).resolve().parents[2]
SCRIPTS = ROOT / "deploy" / "slurm"
COMMANDS = ("munged", "mungekey", "mariadbd", "slurmdbd", "slurmctld", "slurmd", "sinfo",
            "sbatch", "squeue", "scontrol", "sacct", "sacctmgr", "sshare")
DAEMONS = ("munged", "mariadbd", "slurmdbd", "slurmctld", "slurmd")
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED",
         "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
# how long a module waits for the cluster to be clean (jobs ended, the node
# idle) at its start and at its end
CLEAN_WAIT_S = 90
# the limits that the clean state puts back: sacctmgr's show fields and the
# names its `set` takes
ASSOC_LIMITS = (("maxjobs", "MaxJobs"), ("maxwall", "MaxWall"), ("grptres", "GrpTRES"),
                ("maxsubmit", "MaxSubmitJobs"), ("grpjobs", "GrpJobs"))
QOS_LIMITS = (("priority", "Priority"), ("maxwall", "MaxWall"), ("maxjobspu", "MaxJobsPerUser"),
              ("maxsubmitpu", "MaxSubmitJobsPerUser"), ("maxtrespu", "MaxTRESPerUser"),
              ("grptres", "GrpTRES"), ("grpjobs", "GrpJobs"))


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
    def __init__(self, directory, port=None, nodes=1):
        self.dir = pathlib.Path(directory)
        self.conf = self.dir / "slurm.conf"
        self.nodes = nodes
        # a multi-node cluster's slurmd are slurmd.node<i> (deploy/slurm/nodes.sh)
        self.daemons = DAEMONS if nodes == 1 else \
            DAEMONS[:-1] + tuple(f"slurmd.node{i}" for i in range(1, nodes + 1))
        # what nodes.sh names the cluster's bridge, namespaces and veths after
        self.net_id = hashlib.sha1(os.path.realpath(self.dir).encode()).hexdigest()[:6]
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
        args = [f"--nodes={self.nodes}"] if name == "start" and self.nodes > 1 else []
        return subprocess.run([str(SCRIPTS / f"{name}.sh"), *args], env=self.script_env,
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
        return all(self.pid(d) in alive for d in self.daemons)

    @property
    def gateway(self):
        """A multi-node cluster's host-side address (its bridge's, slurmctld's
        in slurm.conf): what the nodes reach this machine at. A larchd whose
        jobs report to it listens there (--listen GATEWAY:0): 127.0.0.1 in a
        node's namespace is the node's own."""
        env = dict(line.split("=", 1) for line in
                   (self.dir / "nodes.env").read_text().splitlines() if "=" in line)
        return env["subnet"] + ".1"

    def kill_node(self, name):
        """Kills node `name` of a multi-node cluster outright: SIGKILL to
        everything in its network namespace (its slurmd, slurmstepd and job
        processes), as a machine that loses power; returns the pids killed.
        start() brings its slurmd back."""
        ns = f"larch-{self.net_id}-{name}"
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              check=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass
        return [int(p) for p in pids]

    def leftovers(self):
        """What of this cluster is left on the machine, as lines: its
        processes, and the network namespaces and links named after it
        (deploy/slurm/nodes.sh); [] when nothing."""
        out = [f"process {pid}: {cmd}" for pid, cmd in self.processes().items()]
        ns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        out += [f"namespace {line.split()[0]}" for line in ns.splitlines()
                if line.startswith(f"larch-{self.net_id}-")]
        links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
        out += [f"link {line.split(':')[1].strip()}" for line in links.splitlines()
                if self.net_id in line.split(":")[1]]
        return out

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
        for name in self.daemons:
            path = self.dir / "log" / f"{name}.log"
            if path.exists():
                tail = path.read_text(errors="replace").splitlines()[-lines:]
                out.append(f"--- {path}\n" + "\n".join(tail))
        return "\n".join(out)


    def cancel_named(self, prefix):
        """scancel of every job in squeue whose name starts with prefix (a
        test's own, which a failed test may leave holding the node for the
        module's next tests)."""
        out = self.run("squeue", "-h", "-o", "%i|%j").stdout
        ids = [i for i, name in (line.split("|", 1) for line in out.splitlines())
               if name.startswith(prefix)]
        if ids:
            self.run("scancel", *ids, check=False)
        return ids

    # ---- the clean state between modules ----------------------------------------

    def node_names(self):
        return sorted(set(self.run("sinfo", "-h", "-N", "-o", "%N").stdout.split()))

    def accounting(self):
        """What of Slurm's accounting a module must leave as it found it:
        {"defaults": {user: account}, "assoc": {(account, user): {field: value}},
        "qos": {name: {field: value}}} (user "" for an account's own row)."""
        users = self.run("sacctmgr", "-nP", "show", "user", "format=user,defaultaccount").stdout
        fields = ",".join(f for f, _ in ASSOC_LIMITS)
        assoc = self.run("sacctmgr", "-nP", "show", "assoc", f"format=account,user,{fields}").stdout
        qfields = ",".join(f for f, _ in QOS_LIMITS)
        qos = self.run("sacctmgr", "-nP", "show", "qos", f"format=name,{qfields}").stdout
        rows = [line.split("|") for line in assoc.splitlines()]
        return {"defaults": dict(line.split("|")[:2] for line in users.splitlines()),
                "assoc": {(r[0], r[1]): dict(zip((f for f, _ in ASSOC_LIMITS), r[2:]))
                          for r in rows},
                "qos": {r[0]: dict(zip((f for f, _ in QOS_LIMITS), r[1:]))
                        for r in (line.split("|") for line in qos.splitlines())}}

    def accounting_changes(self, baseline):
        """How the accounting differs from baseline (accounting()), as lines."""
        now = self.accounting()
        out = []
        for user, acct in baseline["defaults"].items():
            if now["defaults"].get(user, acct) != acct:
                out.append(f"user {user}: default account {now['defaults'][user]}, not {acct}")
        for key, limits in now["assoc"].items():
            want = baseline["assoc"].get(key, {f: "" for f, _ in ASSOC_LIMITS})
            if limits != want:
                out.append(f"association {key}: {limits}, not {want}")
        for name, limits in now["qos"].items():
            if limits != baseline["qos"].get(name):
                out.append(f"qos {name}: {limits}, not {baseline['qos'].get(name, 'absent')}")
        return out

    def restore_accounting(self, baseline):
        """Puts back each user's default account and the limits of every
        association and QOS of baseline; associations added since get no
        limits, QOS added since are deleted."""
        now = self.accounting()
        for user, acct in baseline["defaults"].items():
            if now["defaults"].get(user, acct) != acct:
                self.sacctmgr("modify", "user", "where", f"name={user}", "set",
                              f"defaultaccount={acct}")

        def sets(table, current, want):
            args = []
            for field, name in table:
                have, to = current.get(field, ""), want.get(field, "")
                if have == to:
                    continue
                if "tres" in field:    # a list: clear each TRES it has that want lacks
                    keep = dict(t.split("=", 1) for t in to.split(",") if t)
                    gone = [t.split("=", 1)[0] for t in have.split(",") if t]
                    tres = {k: "-1" for k in gone if k not in keep} | keep
                    args.append(f"{name}=" + ",".join(f"{k}={v}" for k, v in tres.items()))
                else:
                    args.append(f"{name}={to or -1}")
            return args

        for (acct, user), limits in now["assoc"].items():
            want = baseline["assoc"].get((acct, user), {})
            args = sets(ASSOC_LIMITS, limits, want)
            if not args:
                continue
            if user:
                self.sacctmgr("modify", "user", "where", f"name={user}", f"account={acct}",
                              "set", *args)
            else:
                self.sacctmgr("modify", "account", "where", f"name={acct}", "set", *args)
        for name, limits in now["qos"].items():
            if name not in baseline["qos"]:
                self.sacctmgr("delete", "qos", name)
                continue
            args = sets(QOS_LIMITS, limits, baseline["qos"][name])
            if args:
                self.sacctmgr("modify", "qos", "where", f"name={name}", "set", *args)

    def not_clean(self):
        """What keeps the cluster from being clean (jobs, node and partition
        states, daemons), as lines; [] when it is. The accounting is apart:
        accounting_changes()."""
        if not self.running():
            return [f"daemons not running: {[d for d in self.daemons if self.pid(d) not in self.processes()]}"]
        out = []
        jobs = self.run("squeue", "-h", "-o", "%i %u %P %T %r %j", check=False)
        if jobs.returncode != 0 or jobs.stdout.strip():
            out.append(f"squeue: {jobs.stdout.strip() or jobs.stderr.strip()}")
        nodes = self.run("sinfo", "-h", "-N", "-o", "%N %T %E", check=False)
        states = {line.split()[1] for line in nodes.stdout.splitlines() if line.split()}
        if nodes.returncode != 0 or states != {"idle"}:
            out.append(f"sinfo -N: {nodes.stdout.strip() or nodes.stderr.strip()}")
        parts = self.run("sinfo", "-h", "-o", "%P %a", check=False)
        if parts.returncode != 0 or any(line.split()[1] != "up" for line in parts.stdout.splitlines()):
            out.append(f"partitions: {parts.stdout.strip() or parts.stderr.strip()}")
        return out

    def wait_clean(self, where, baseline, timeout=CLEAN_WAIT_S):
        """Waits until the cluster is clean (not_clean() and the accounting
        as baseline has it), at most timeout seconds; fails saying what is
        not, at where."""
        deadline = time.monotonic() + timeout
        while (left := self.not_clean()) and time.monotonic() < deadline:
            time.sleep(0.2)
        left += self.accounting_changes(baseline)
        if left:
            pytest.fail(f"the Slurm cluster in {self.dir} is not clean at {where} after "
                        f"{timeout}s (each module that uses it cancels its jobs and puts back "
                        "what it changed at its end):\n  " + "\n  ".join(left), pytrace=False)

    def clean_up(self, baseline):
        """Makes the cluster clean for the next module: its daemons up, no
        larchd running against it, every job cancelled, the node resumed,
        the partitions up, the accounting as baseline (accounting()) has it."""
        if not self.running():
            self.start()            # a test stopped a daemon and failed before it restarted
        for d in larchd.STARTED:
            if d.running() and "slurm" in d.args and d.env.get("SLURM_CONF") == str(self.conf):
                d.signal()
                try:
                    d.wait(30)
                except subprocess.TimeoutExpired:
                    d.proc.kill()
                    d.proc.wait()
        deadline = time.monotonic() + CLEAN_WAIT_S
        while True:
            ids = self.run("squeue", "-h", "-o", "%i").stdout.split()
            if not ids or time.monotonic() > deadline:
                break
            self.run("scancel", *ids, check=False)   # a job may end in between
            time.sleep(0.2)
        for node in self.node_names():
            state = self.run("sinfo", "-h", "-N", "-n", node, "-o", "%T").stdout.split()
            if any(s.startswith(("drain", "down")) or "+drain" in s for s in state):
                self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=False)
        for line in self.run("sinfo", "-h", "-o", "%R %a").stdout.splitlines():
            name, avail = line.split()
            if avail != "up":
                self.run("scontrol", "update", f"PartitionName={name}", "State=UP")
        self.restore_accounting(baseline)

def fresh_cluster(directory, nodes=1):
    """A cluster of nodes nodes started in an empty directory on free ports."""
    return SlurmCluster(directory, port=free_ports(), nodes=nodes).start()


def with_test_users(cluster):
    """Gives the test users associations (larchd as root submits each job
    as its owner, AccountingStorageEnforce=associations) and records the
    accounting each module must leave as it found it."""
    for name in unix_users.TEST_USERS:
        cluster.add_user(name, "larch-test")
    cluster.baseline = cluster.accounting()
    return cluster


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory):
    """The session's running cluster: the one in $LARCH_SLURM_DIR if it is
    up (left running), else a new one in a temporary directory, stopped at
    the end. Tests ask for slurm_cluster, which keeps it clean per module."""
    require_slurm()
    given = os.environ.get("LARCH_SLURM_DIR")
    cluster = None
    if given:
        cluster = SlurmCluster(pathlib.Path(given).resolve())
        if not cluster.running():
            cluster = None
    fresh = cluster is None
    if fresh:
        cluster = fresh_cluster(tmp_path_factory.mktemp("slurm"))
    with_test_users(cluster)
    yield cluster
    if fresh:
        cluster.stop()
        left = cluster.processes()
        assert not left, f"processes of the cluster in {cluster.dir} left after stop.sh: {left}"


@pytest.fixture(scope="module")
def slurm_cluster(slurm_session, request):
    """The session's cluster, clean when the module starts (waited for, at
    most CLEAN_WAIT_S) and made clean again when it ends: see the top of
    this file."""
    cluster = slurm_session
    cluster.wait_clean(f"the start of {request.module.__name__}", cluster.baseline)
    yield cluster
    cluster.clean_up(cluster.baseline)
    cluster.wait_clean(f"the end of {request.module.__name__}", cluster.baseline)


MULTINODE = 3


@pytest.fixture(scope="session")
def slurm_nodes_session(tmp_path_factory):
    """A cluster of MULTINODE nodes (node1 ..), started for the session at
    the first test that asks for it, in a temporary directory on free
    ports; stopped at the end, with nothing of it left (leftovers()).
    Tests ask for slurm_nodes, which keeps it clean per module."""
    require_slurm()
    cluster = with_test_users(fresh_cluster(tmp_path_factory.mktemp("slurm-nodes"), MULTINODE))
    yield cluster
    cluster.stop()
    left = cluster.leftovers()
    assert not left, f"left of the cluster in {cluster.dir} after stop.sh: {left}"


@pytest.fixture(scope="module")
def slurm_nodes(slurm_nodes_session, request):
    """The session's multi-node cluster, clean when the module starts and
    made clean when it ends, as slurm_cluster."""
    cluster = slurm_nodes_session
    cluster.wait_clean(f"the start of {request.module.__name__}", cluster.baseline)
    yield cluster
    cluster.clean_up(cluster.baseline)
    cluster.wait_clean(f"the end of {request.module.__name__}", cluster.baseline)
