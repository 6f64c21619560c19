"""larch installed as a service (docs/install.md): `cmake --install` into a
prefix that is then moved, the Debian package `cpack -G DEB` makes (built,
inspected, installed with dpkg, run as its unit says, purged), and the
settings larchd reloads on SIGHUP.

The package test installs into this machine's / and purges afterwards: it
runs as root only (CI's throwaway machine), and skips where a package or a
user named larch exists already. Where systemd is PID 1 it starts the unit
with systemctl; elsewhere it runs the unit's ExecStart as the unit's User
with its Environment, and says which it did."""
import json
import os
import pathlib
import pwd
import re
import select
import shlex
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

from larchd import BUILD, LISTENING, Larchd

ROOT = pathlib.Path(__file__).resolve().parents[2]
# what the installed programs get: no LD_LIBRARY_PATH, nothing of the build tree
CLEAN_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LC_ALL": "C"}
FINAL = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def run(cmd, timeout=120, **kw):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          timeout=timeout, **kw)


def quick_spec(examples):
    """The installed fmnist-quick example, cut to 20 steps (it is the files
    that are tested, not the training)."""
    spec = json.loads((examples / "fmnist-quick.json").read_text())
    spec.update(steps=20, eval_every=20, checkpoint_every=20, log_every=10)
    spec["schedule"] = dict(spec["schedule"], warmup={"steps": 5})
    return spec


def wait_final(url, headers, job, timeout=90):
    deadline = time.monotonic() + timeout
    while True:
        j = requests.get(f"{url}/v1/jobs/{job}", headers=headers, timeout=30).json()
        if j["state"] in FINAL or time.monotonic() > deadline:
            return j
        time.sleep(0.2)


def read_listening(proc, log, timeout=15):
    """The port from larchd's first stdout line."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    line = proc.stdout.readline() if ready else ""
    m = LISTENING.match(line.strip())
    assert m, f"larchd printed {line!r}, not its listening line: {log()}"
    return int(m.group(3))


# ---- (a) cmake --install into a prefix, moved ------------------------------------


@pytest.fixture(scope="module")
def prefix(tmp_path_factory):
    """cmake --install into a temporary prefix, then moved elsewhere: what
    runs from it may lean neither on the build tree nor on the path it was
    installed to."""
    base = tmp_path_factory.mktemp("install")
    first = base / "first"
    r = run(["cmake", "--install", BUILD, "--prefix", first])
    assert r.returncode == 0, r.stdout + r.stderr
    moved = base / "moved"
    first.rename(moved)
    return moved


def libdir_of(prefix):
    """lib/larch, or lib/<multiarch>/larch (GNUInstallDirs, prefix /usr)."""
    found = [p.parent.relative_to(prefix) for p in prefix.glob("lib*/**/liblarch_trainer.so")]
    assert len(found) == 1, found
    return found[0]


def test_install_layout(prefix):
    libdir = libdir_of(prefix)
    for rel in ["bin/larchd", "bin/larch", "bin/larch-train", f"{libdir}/liblarch_trainer.so",
                f"{libdir}/liblarch_kernels.so", f"{libdir}/liblarch_spec.so",
                "share/doc/larch/README.md", "share/doc/larch/install.md",
                "share/doc/larch/larchd.conf.example", "share/doc/larch/examples/fmnist-quick.json",
                "share/doc/larch/systemd/owner.conf", "etc/larch/larchd.conf",
                "etc/logrotate.d/larchd", "lib/systemd/system/larchd.service"]:
        assert (prefix / rel).is_file(), f"{rel} is not installed"
    # the unit and the settings name the prefix installed to
    unit = (prefix / "lib/systemd/system/larchd.service").read_text()
    first = prefix.parent / "first"
    assert f"ExecStart={first}/bin/larchd --config {first}/etc/larch/larchd.conf" in unit, unit
    # RUNPATHs are relative to the file ($ORIGIN), none names the build tree;
    # the GPU backend's also name the CUDA toolkit's directory
    for f in list((prefix / "bin").iterdir()) + list((prefix / libdir).iterdir()):
        dyn = run(["readelf", "-d", f]).stdout
        paths = re.findall(r"R(?:UN)?PATH.*\[(.*)\]", dyn)
        assert paths and paths[0].split(":")[0].startswith("$ORIGIN"), (f, paths)
        if not f.name.endswith("_cuda.so"):
            assert all(p.startswith("$ORIGIN") for p in paths[0].split(":")), (f, paths)
        assert str(BUILD) not in dyn and str(ROOT) not in dyn, f


def test_installed_programs_run(prefix):
    r = run([prefix / "bin/larchd", "--help"], env=CLEAN_ENV, cwd="/")
    assert r.returncode == 0 and "SIGHUP" in r.stdout, r.stdout + r.stderr
    example = prefix / "share/doc/larch/examples/fmnist-quick.json"
    r = run([prefix / "bin/larch-train", "--check", example], env=CLEAN_ENV, cwd="/")
    assert r.returncode == 0 and json.loads(r.stdout)["name"] == "fmnist-quick", r.stderr
    r = run([prefix / "bin/larch", "--help"], env=CLEAN_ENV, cwd="/")
    assert r.returncode == 0 and "usage: larch" in r.stdout, r.stderr


def test_installed_larchd_runs_a_job(prefix, tmp_path):
    """The installed larchd finds the larch-train beside it and runs a job."""
    d = Larchd(tmp_path, args=["--run-as", "service"], env=CLEAN_ENV)
    d.exe = prefix / "bin" / "larchd"
    d.start()
    try:
        d.wait_log(rf"listening on .*, {re.escape(str(prefix))}/bin/larch-train, ")
        r = requests.post(d.url + "/v1/jobs", json=quick_spec(prefix / "share/doc/larch/examples"),
                          headers=d.auth(), timeout=30)
        assert r.status_code == 201, r.text
        job = wait_final(d.url, d.auth(), r.json()["id"])
        assert job["state"] == "COMPLETED", job
    finally:
        d.stop()


# ---- (b) the Debian package -------------------------------------------------------


def package_installed():
    r = run(["dpkg-query", "-W", "-f=${Status}", "larch"])
    return r.returncode == 0 and "installed" in r.stdout


def user_exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def unit_service_section(text):
    """[Service] of a unit file: {key: [values]}."""
    out, section = {}, None
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("["):
            section = line
        elif section == "[Service]" and "=" in line and not line.startswith("#"):
            k, v = line.split("=", 1)
            out.setdefault(k, []).append(v)
    return out


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def deb(tmp_path_factory):
    if not shutil.which("cpack") or not shutil.which("dpkg-deb"):
        pytest.skip("cpack or dpkg-deb is missing (deploy/install-deps.sh installs them)")
    out = tmp_path_factory.mktemp("deb")
    r = run(["cpack", "-G", "DEB", "-B", out], cwd=BUILD)
    assert r.returncode == 0, r.stdout + r.stderr
    debs = list(out.glob("larch_*.deb"))
    assert len(debs) == 1, r.stdout
    return debs[0]


def test_deb_contents(deb, tmp_path):
    info = run(["dpkg-deb", "-I", deb]).stdout
    fields = dict(re.findall(r"^ (\w[\w-]*): (.*)$", info, re.M))
    version = re.search(r"project\(larch VERSION (\S+)",
                        (ROOT / "CMakeLists.txt").read_text()).group(1)
    assert fields["Package"] == "larch" and fields["Version"] == version, fields
    depends = fields["Depends"]
    for lib in ["libc6", "libjansson4", "libmicrohttpd12", "libsqlite3-0", "libcurl4", "adduser",
                "libopenblas0-openmp"]:
        assert lib in depends, depends                      # dpkg-shlibdeps' and ours
    assert "slurm-client" in fields["Suggests"] and "slurm-client" not in depends
    conffiles = run(["dpkg-deb", "-I", deb, "conffiles"]).stdout.split()
    assert conffiles == ["/etc/larch/larchd.conf", "/etc/logrotate.d/larchd"], conffiles
    run(["dpkg-deb", "-e", deb, tmp_path / "control"])
    assert "adduser --system" in (tmp_path / "control/postinst").read_text()
    assert "deluser --system" in (tmp_path / "control/postrm").read_text()
    for script in ["postinst", "prerm", "postrm"]:
        assert os.access(tmp_path / "control" / script, os.X_OK), script
    files = set(re.findall(r" \./(\S+)$", run(["dpkg-deb", "-c", deb]).stdout, re.M))
    for f in ["usr/bin/larchd", "usr/bin/larch", "usr/bin/larch-train",
              "lib/systemd/system/larchd.service",
              "etc/larch/larchd.conf", "etc/logrotate.d/larchd",
              "usr/share/doc/larch/install.md", "usr/share/doc/larch/examples/fmnist-quick.json",
              "usr/share/doc/larch/systemd/owner.conf"]:
        assert f in files, f"{f} not in the package: {sorted(files)}"
    assert not any(f.startswith("usr/local/") for f in files), sorted(files)
    assert any(re.fullmatch(r"usr/lib/(.+/)?larch/liblarch_trainer\.so", f) for f in files)


def start_direct(unit, tmp_path):
    """The unit's ExecStart as its User and Group, with its Environment (and
    a free port instead of the packaged 8080), from /, as systemd would."""
    svc = unit_service_section(unit)
    user, group = svc["User"][-1], svc["Group"][-1]
    env = dict(CLEAN_ENV)
    for assignment in svc.get("Environment", []):
        for kv in shlex.split(assignment):
            k, v = kv.split("=", 1)
            env[k] = v
    env["LARCHD_LISTEN"] = "127.0.0.1:0"
    log_path = tmp_path / "larchd.direct.log"
    argv = shlex.split(svc["ExecStart"][-1])
    cmd = ["setpriv", f"--reuid={user}", f"--regid={group}", "--init-groups", "--"] + argv
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=log, env=env, cwd="/", text=True)
    log.close()
    port = read_listening(proc, lambda: log_path.read_text(errors="replace"))
    return proc, port, log_path


def test_deb_installs_runs_and_purges(deb, tmp_path):
    if os.geteuid() != 0:
        pytest.skip("dpkg -i needs root (CI runs this as root on a throwaway machine)")
    if package_installed() or user_exists("larch"):
        pytest.skip("a package or a user named larch is here already: not touching them")
    r = run(["dpkg", "-i", deb])
    assert r.returncode == 0, r.stdout + r.stderr
    dropin = pathlib.Path("/run/systemd/system/larchd.service.d")
    proc = None
    try:
        larch = pwd.getpwnam("larch")
        assert larch.pw_uid < 1000 and larch.pw_dir == "/var/lib/larch", larch
        st = os.stat("/var/lib/larch")
        assert st.st_uid == larch.pw_uid and st.st_mode & 0o777 == 0o700
        r = run(["/usr/bin/larch", "--help"], env=CLEAN_ENV, cwd="/")
        assert r.returncode == 0 and "usage: larch" in r.stdout, r.stderr
        unit_path = pathlib.Path("/lib/systemd/system/larchd.service")
        unit = unit_path.read_text()
        if shutil.which("systemd-analyze"):
            r = run(["systemd-analyze", "verify", unit_path])
            assert r.returncode == 0 and "larchd" not in r.stderr, r.stderr
            # and with the owner-mode drop-in, in a unit path of its own
            units = tmp_path / "units"
            (units / "larchd.service.d").mkdir(parents=True)
            shutil.copy(unit_path, units)
            shutil.copy("/usr/share/doc/larch/systemd/owner.conf", units / "larchd.service.d")
            r = run(["systemd-analyze", "verify", units / "larchd.service"],
                    env=dict(CLEAN_ENV, SYSTEMD_UNIT_PATH=f"{units}:"))
            assert r.returncode == 0 and "larchd" not in r.stderr, r.stderr

        if pathlib.Path("/proc/1/comm").read_text().strip() == "systemd":
            how = "systemctl start larchd (systemd is PID 1)"
            port = free_port()
            dropin.mkdir(parents=True, exist_ok=True)
            (dropin / "test.conf").write_text(
                f"[Service]\nEnvironment=LARCHD_LISTEN=127.0.0.1:{port}\n")
            run(["systemctl", "daemon-reload"])
            r = run(["systemctl", "start", "larchd.service"])
            assert r.returncode == 0, r.stderr + run(["journalctl", "-u", "larchd"]).stdout
            url = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + 15
            while True:
                try:
                    requests.get(url + "/healthz", timeout=5)
                    break
                except requests.ConnectionError:
                    assert time.monotonic() < deadline, "larchd.service did not listen"
                    time.sleep(0.1)
        else:
            how = "the unit's ExecStart run directly as its User (systemd is not PID 1)"
            proc, port, log_path = start_direct(unit, tmp_path)
            url = f"http://127.0.0.1:{port}"
        print(f"test_install: larchd ran by {how}")
        token = pathlib.Path("/var/lib/larch/admin.token").read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        who = requests.get(url + "/v1/whoami", headers=headers, timeout=30).json()
        assert who["role"] == "admin", who
        # a job: the packaged larch-train, as the user larch
        r = requests.post(url + "/v1/jobs", json=quick_spec(pathlib.Path(
            "/usr/share/doc/larch/examples")), headers=headers, timeout=30)
        assert r.status_code == 201, r.text
        job = wait_final(url, headers, r.json()["id"])
        assert job["state"] == "COMPLETED", job
        jobdir = pathlib.Path("/var/lib/larch/jobs") / job["id"]
        assert jobdir.stat().st_uid == larch.pw_uid
        # ExecReload: SIGHUP
        if proc is None:
            assert run(["systemctl", "reload", "larchd.service"]).returncode == 0
            assert run(["systemctl", "is-active", "larchd.service"]).stdout.strip() == "active"
        else:
            proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while "SIGHUP: log reopened" not in log_path.read_text(errors="replace"):
                assert time.monotonic() < deadline, log_path.read_text(errors="replace")
                time.sleep(0.05)
            assert proc.poll() is None
    finally:
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
        if dropin.exists():
            run(["systemctl", "stop", "larchd.service"])
            shutil.rmtree(dropin)
            run(["systemctl", "daemon-reload"])
        r = run(["dpkg", "--purge", "larch"])
    assert r.returncode == 0, r.stdout + r.stderr
    assert not package_installed() and not user_exists("larch")
    for gone in ["/usr/bin/larchd", "/etc/larch", "/var/lib/larch", "/var/log/larch",
                 "/lib/systemd/system/larchd.service"]:
        assert not os.path.exists(gone), f"{gone} is left after dpkg --purge"


# ---- (c) SIGHUP ---------------------------------------------------------------------


def gpu_job(name):
    spec = json.loads((ROOT / "trainer/examples/fmnist-quick.json").read_text())
    return dict(spec, name=name, resources={"gpus_per_node": 1})


def test_sighup_reloads_what_it_may(tmp_path):
    """log_level and gpu_memory change at once; threads (not reloadable)
    keeps its value with a warning; the log file is reopened after a
    rename (logrotate); a file that no longer loads changes nothing."""
    conf = tmp_path / "larchd.conf"
    log = tmp_path / "larchd.log"
    conf.write_text(f"log_level = warn\nthreads = 2\ngpu_memory = 1M\nlog_file = {log}\n")
    d = Larchd(tmp_path, args=["--config", str(conf), "--run-as", "service"]).start()
    try:
        r = requests.post(d.url + "/v1/jobs", json=gpu_job("before"), headers=d.auth(), timeout=30)
        assert r.status_code == 422 and "a GPU has" in r.json()["error"]["message"], r.text
        requests.get(d.url + "/v1/jobs/j-999998", headers=d.auth(), timeout=30)  # not logged

        conf.write_text(f"log_level = info\nthreads = 3\ngpu_memory = 80G\nlog_file = {log}\n")
        log.rename(tmp_path / "larchd.log.1")
        d.signal(signal.SIGHUP)
        deadline = time.monotonic() + 10
        while not log.exists() or "changed now" not in log.read_text():
            assert time.monotonic() < deadline, f"no reload line in a new {log}"
            time.sleep(0.05)
        text = log.read_text()
        assert f"settings read again from {conf}: changed now gpu_memory, log_level" in text, text
        assert "config: threads = 3 takes a restart: larchd keeps 2 until then" in text, text

        r = requests.post(d.url + "/v1/jobs", json=gpu_job("after"), headers=d.auth(), timeout=30)
        assert r.status_code == 201, r.text
        requests.post(f"{d.url}/v1/jobs/{r.json()['id']}/cancel", headers=d.auth(), timeout=30)
        requests.get(d.url + "/v1/jobs/j-999999", headers=d.auth(), timeout=30)
        deadline = time.monotonic() + 10
        while "GET /v1/jobs/j-999999 404" not in log.read_text():   # info: request lines
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        both = (tmp_path / "larchd.log.1").read_text() + log.read_text()
        assert "j-999998" not in both                               # warn: none

        conf.write_text("log_level = loud\n")
        d.signal(signal.SIGHUP)
        d.log_path = log
        d.wait_log(r"error SIGHUP: log reopened; the settings were not reloaded, larchd keeps "
                   r"its own: .*log_level: must be error, warn, info or debug")
        r = requests.post(d.url + "/v1/jobs", json=gpu_job("still"), headers=d.auth(), timeout=30)
        assert r.status_code == 201, r.text                        # gpu_memory kept 80G
        requests.post(f"{d.url}/v1/jobs/{r.json()['id']}/cancel", headers=d.auth(), timeout=30)
    finally:
        d.stop()
