"""larchd over HTTPS (tls_cert, tls_key) and X-Forwarded-For from trusted
proxies (trusted_proxies).

A CA and a server certificate for 127.0.0.1 are made here with the openssl
command; larchd serves with them and real clients talk to it: curl
--cacert, Python requests with verify=, and the larch CLI with LARCH_CA.
Each must refuse the server under another CA. The key file's permissions,
the two options given alone and a plain-HTTP request to the TLS port are
checked too.

Jobs report back over HTTPS: real larch-train jobs on the local executor
post their metrics and result with the CA file larchd passes them as
LARCH_CA (job_ca; a self-signed tls_cert by default), and without it say
in their log which URL they could not verify and why, and still complete.
"""
import os
import re
import shutil
import socket
import ssl
import subprocess
import time

import pytest
import requests

import unix_users
from larchd import Larchd, larchd_exe
from test_api_jobs import FINAL, JSON, Server, tiny_spec
from test_cli_larch import clean_env, run


def openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(d, name):
    openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key",
            "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN=larch test {name}", cwd=d)
    return d / f"{name}.pem"


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    """A CA, a server certificate it signed for 127.0.0.1 (key 0600), and
    another CA that signed nothing of larchd's."""
    if not shutil.which("openssl"):
        pytest.fail("the openssl command is missing (Debian: openssl)")
    d = tmp_path_factory.mktemp("pki")
    ca = make_ca(d, "ca")
    other = make_ca(d, "other")
    openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "server.key", "-out",
            "server.csr", "-subj", "/CN=127.0.0.1", cwd=d)
    (d / "ext.cnf").write_text("subjectAltName = IP:127.0.0.1\nbasicConstraints = CA:FALSE\n"
                               "extendedKeyUsage = serverAuth\n")
    openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key",
            "-CAcreateserial", "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf", cwd=d)
    os.chmod(d / "server.key", 0o600)
    return {"dir": d, "ca": ca, "other": other, "cert": d / "server.pem",
            "key": d / "server.key"}


@pytest.fixture(scope="module")
def tls(tmp_path_factory, pki):
    """One larchd serving HTTPS for the module (no trusted proxies)."""
    server = Larchd(tmp_path_factory.mktemp("tls"),
                    args=["--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"])]).start()
    yield server
    if server.running():
        server.stop()


def curl(*args):
    return subprocess.run(["curl", "-sS", "--max-time", "10", *args], capture_output=True,
                          text=True, timeout=30)


def test_serves_https_and_says_so(tls, pki):
    assert tls.url.startswith("https://127.0.0.1:")
    tls.wait_log(rf"listening on https://127\.0\.0\.1:{tls.port}, ")
    out = curl("--cacert", str(pki["ca"]), tls.url + "/healthz")
    assert out.returncode == 0, out.stderr
    assert '"status":"ok"' in out.stdout
    out = curl("--cacert", str(pki["ca"]), "-w", "%{http_code}", "-o", "/dev/null",
               "-H", f"Authorization: Bearer {tls.admin_token}", tls.url + "/v1/jobs")
    assert out.stdout == "200", out.stderr
    out = curl("-w", "%{http_code}", "-o", "/dev/null", "--cacert", str(pki["ca"]),
               tls.url + "/v1/jobs")
    assert out.stdout == "401"


def test_curl_refuses_another_ca(tls, pki):
    out = curl("--cacert", str(pki["other"]), tls.url + "/healthz")
    assert out.returncode == 60, (out.returncode, out.stderr)


def test_python_requests(tls, pki):
    r = requests.get(tls.url + "/v1/jobs", headers=tls.auth(), verify=str(pki["ca"]),
                     timeout=10)
    assert r.status_code == 200
    assert r.json()["jobs"] == []
    with pytest.raises(requests.exceptions.SSLError):
        requests.get(tls.url + "/healthz", verify=str(pki["other"]), timeout=10)


def test_cli_with_larch_ca(tls, pki, tmp_path):
    env = clean_env(tmp_path, url=tls.url, token=tls.admin_token, LARCH_CA=str(pki["ca"]))
    out = run(env, "ls")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ID ")

    env["LARCH_CA"] = str(pki["other"])
    out = run(env, "ls")
    assert out.returncode == 3
    assert out.stderr.startswith(f"larch: cannot reach larchd at {tls.url}: its TLS "
                                 f"certificate does not verify against the CA file "
                                 f"{pki['other']} (LARCH_CA): "), out.stderr

    del env["LARCH_CA"]             # the system's store: does not know our CA
    out = run(env, "ls")
    assert out.returncode == 3
    assert "does not verify against the system's CA store" in out.stderr, out.stderr

    env["LARCH_CA"] = str(tmp_path / "missing.pem")
    out = run(env, "ls")
    assert out.returncode == 3
    assert f"the CA file {tmp_path / 'missing.pem'} (LARCH_CA) cannot be used" in out.stderr


def test_cli_ca_from_config_file(tls, pki, tmp_path):
    config = tmp_path / ".config" / "larch" / "config"
    config.parent.mkdir(parents=True)
    config.write_text(f"url = {tls.url}\ntoken = {tls.admin_token}\nca = {pki['ca']}\n")
    config.chmod(0o600)
    out = run(clean_env(tmp_path), "ls")
    assert out.returncode == 0, out.stderr


def test_plain_http_to_the_tls_port(tls, pki):
    """Answered or closed, never left hanging; HTTPS goes on after."""
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as s:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            data = b""
            while True:
                try:
                    chunk = s.recv(4096)        # socket.timeout fails the test
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                data += chunk
            assert b'"status":"ok"' not in data
    assert tls.running()
    ctx = ssl.create_default_context(cafile=str(pki["ca"]))
    r = requests.get(tls.url + "/healthz", verify=str(pki["ca"]), timeout=10)
    assert r.status_code == 200
    with socket.create_connection(("127.0.0.1", tls.port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            assert s.version() in ("TLSv1.2", "TLSv1.3")


def start_fails(tmp_path, *args):
    """Runs larchd with args; returns (exit status, stderr) when it exits."""
    cmd = [str(larchd_exe()), "--listen", "127.0.0.1:0", "--state-dir",
           str(tmp_path / "state"), *map(str, args)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    return p.returncode, p.stderr


def test_key_others_can_read_is_refused(pki, tmp_path):
    key = tmp_path / "open.key"
    shutil.copy(pki["key"], key)
    key.chmod(0o644)
    code, err = start_fails(tmp_path, "--tls-cert", pki["cert"], "--tls-key", key)
    assert code == 1
    assert f"larchd: tls_key {key}: permissions 0644 are too open" in err, err
    assert not (tmp_path / "state").exists(), "refused after touching the state dir"


def test_bad_certificate_names_the_files(pki, tmp_path):
    cert = tmp_path / "bad.pem"
    text = pki["cert"].read_text().splitlines()
    text[2] = "A" * len(text[2])                 # a corrupt base64 line
    cert.write_text("\n".join(text) + "\n")
    code, err = start_fails(tmp_path, "--tls-cert", cert, "--tls-key", pki["key"])
    assert code == 1
    assert f"tls_cert {cert}, tls_key {pki['key']}: GnuTLS" in err, err
    code, err = start_fails(tmp_path, "--tls-cert", tmp_path / "none.pem", "--tls-key",
                            pki["key"])
    assert code == 1
    assert f"tls_cert {tmp_path / 'none.pem'}: No such file or directory" in err, err


@pytest.mark.parametrize("given", ["tls-cert", "tls-key"])
def test_one_option_alone_is_exit_2(pki, tmp_path, given):
    path = pki["cert"] if given == "tls-cert" else pki["key"]
    code, err = start_fails(tmp_path, f"--{given}", path)
    assert code == 2
    assert err == (f"larchd: tls_cert and tls_key: give both or neither (only "
                   f"{given.replace('-', '_')} is set)\n")


# ---- jobs under an HTTPS larchd (job_ca, LARCH_CA) -------------------------------


class TlsServer(Server):
    """test_api_jobs' Server (users alice and bob) over HTTPS, trusting ca."""

    def __init__(self, tmp, ca, args, env=None):    # Server's, with env
        self.ca = str(ca)
        tmp.mkdir(parents=True, exist_ok=True)
        self.d = Larchd(tmp, args=list(args), env=env).start()
        self.url = self.d.url
        self.admin = {**self.d.auth(), **JSON}
        self.alice = {**self.d.auth(self.make_user("alice")), **JSON}
        self.bob = {**self.d.auth(self.make_user("bob")), **JSON}

    def get(self, path, who, **kw):
        return super().get(path, who, verify=self.ca, **kw)

    def post(self, path, who, body=None, headers=None, **kw):
        return super().post(path, who, body, headers, verify=self.ca, **kw)


def job_posts(log, job_id):
    """The trainer's posts for job_id in larchd's log: [(what, status)]."""
    return re.findall(rf" POST /v1/jobs/{job_id}/(metrics|result) (\d+) ", log)


def run_job(server, who, name):
    """A tiny real job, to its end: (its id, its stderr.log)."""
    job_id = server.submit(who, tiny_spec(name, steps=10))
    job = server.wait(job_id, FINAL, timeout=60)
    assert job["state"] == "COMPLETED", job
    stderr = (server.d.state_dir / "jobs" / job_id / "stderr.log").read_text()
    return job_id, stderr


def test_jobs_report_with_job_ca(pki, tmp_path):
    """A job of alice's (her own Unix user when larchd runs as root) posts its
    metrics and result over HTTPS, trusting the private CA through job_ca."""
    args = ["--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]),
            "--job-ca", str(pki["ca"])]
    if os.geteuid() == 0:
        # jobs run as their owners: a CA file they cannot read stops larchd
        os.chmod(pki["dir"], 0o700)
        code, err = start_fails(tmp_path / "closed", *args)
        assert code != 0
        assert (f"larchd: job_ca {pki['ca']}: jobs run as their owners and cannot read it: "
                f"{pki['dir']} above it is closed to other users (mode 0700: chmod o+x)"
                in err), err
        unix_users.make_reachable(pki["dir"])
    server = TlsServer(tmp_path / "ok", pki["ca"], args)
    try:
        server.d.wait_log(rf"jobs verify larchd's certificate with {re.escape(str(pki['ca']))} "
                          r"\(LARCH_CA\)")
        job_id, stderr = run_job(server, server.alice, "https-job-ca")
        posts = job_posts(server.d.log(), job_id)
        assert ("metrics", "200") in posts and ("result", "200") in posts, posts
        assert {status for _, status in posts} == {"200"}, posts
        assert "report:" not in stderr, stderr
        series = server.get(f"/v1/jobs/{job_id}/metrics", server.alice).json()["series"]
        assert [p[0] for p in series["train/loss"]] == list(range(1, 11))
    finally:
        server.stop()


def test_jobs_without_the_ca_say_why_and_complete(tls, pki):
    """The module's larchd: a certificate of a private CA and no job_ca, so
    jobs verify against the system's store, which does not know the CA."""
    assert "jobs verify larchd's certificate" not in tls.log()
    r = requests.post(tls.url + "/v1/jobs", json=tiny_spec("https-no-ca", steps=10),
                      headers=tls.auth(), verify=str(pki["ca"]), timeout=10)
    assert r.status_code == 201, r.text
    job_id = r.json()["id"]
    deadline = time.monotonic() + 60
    while (job := requests.get(f"{tls.url}/v1/jobs/{job_id}", headers=tls.auth(),
                               verify=str(pki["ca"]), timeout=10).json())["state"] not in FINAL:
        assert time.monotonic() < deadline, job
        time.sleep(0.1)
    assert job["state"] == "COMPLETED", job
    stderr = (tls.state_dir / "jobs" / job_id / "stderr.log").read_text()
    want = (f"larch-train: report: POST {tls.url}/v1/jobs/{job_id}/metrics: larchd's TLS "
            f"certificate does not verify against the system's CA store (larchd's job_ca sets "
            f"LARCH_CA for jobs): SSL certificate problem: unable to get local issuer "
            f"certificate; posting nothing more to larchd")
    assert want in stderr, stderr
    assert stderr.count("larch-train: report: POST") == 1, stderr
    assert job_posts(tls.log(), job_id) == []
    # nothing lost: larchd read metrics.jsonl when the job ended
    series = requests.get(f"{tls.url}/v1/jobs/{job_id}/metrics", headers=tls.auth(),
                          verify=str(pki["ca"]), timeout=10).json()["series"]
    assert [p[0] for p in series["train/loss"]] == list(range(1, 11))


def test_a_ca_file_the_trainer_cannot_use_is_named(tls, pki, trainer, tmp_path):
    """larch-train itself (the reporter) with LARCH_CA of a missing file, and
    of another CA: one line each naming the URL, the file and the reason."""
    spec = tiny_spec("ca-file", steps=3)
    base = {k: v for k, v in os.environ.items() if not k.startswith("LARCH_")}
    base.update(LARCH_SERVER_URL=tls.url, LARCH_JOB_ID="j-000999", LARCH_JOB_TOKEN="t")
    url = f"{tls.url}/v1/jobs/j-000999/metrics"
    for ca, why in ((tmp_path / "missing.pem", f"the CA file {tmp_path / 'missing.pem'} "
                     f"(LARCH_CA) cannot be used: "),
                    (pki["other"], f"larchd's TLS certificate does not verify against the "
                     f"CA file {pki['other']} (LARCH_CA): SSL certificate problem: ")):
        out = subprocess.run([str(trainer.exe), "--spec", str(trainer.write_spec(spec)),
                              "--job-dir", str(tmp_path / ca.stem), "--quiet"],
                             env=dict(base, LARCH_CA=str(ca)), capture_output=True, text=True,
                             timeout=120)
        assert out.returncode == 0, out.stderr
        assert f"larch-train: report: POST {url}: {why}" in out.stderr, out.stderr
        assert out.stderr.count("report: POST") == 1, out.stderr


def test_a_self_signed_certificate_is_the_jobs_ca(tmp_path):
    """No job_ca: a self-signed tls_cert is what jobs trust (LARCH_CA)."""
    d = tmp_path / "self"
    d.mkdir()
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-nodes", "-keyout", "self.key", "-out", "self.pem", "-days", "2", "-subj",
            "/CN=127.0.0.1", "-addext", "subjectAltName = IP:127.0.0.1", cwd=d)
    os.chmod(d / "self.key", 0o600)
    os.chmod(d / "self.pem", 0o644)
    unix_users.make_reachable(d)
    server = TlsServer(tmp_path / "srv", d / "self.pem",
                       ["--tls-cert", str(d / "self.pem"), "--tls-key", str(d / "self.key")])
    try:
        server.d.wait_log(rf"jobs verify larchd's certificate with "
                          rf"{re.escape(str(d / 'self.pem'))} \(LARCH_CA\)")
        job_id, stderr = run_job(server, server.bob, "https-self-signed")
        posts = job_posts(server.d.log(), job_id)
        assert ("metrics", "200") in posts and ("result", "200") in posts, posts
        assert "report:" not in stderr, stderr
    finally:
        server.stop()


def test_a_slurm_job_reports_with_job_ca(pki, tmp_path, slurm_cluster):
    """The batch script exports job_ca as LARCH_CA; the job, alice's under
    Slurm (as root), posts its metrics over HTTPS. A LARCH_CA in larchd's own
    environment (which sbatch passes on) is not what the job gets."""
    unix_users.make_reachable(pki["dir"])
    env = dict(slurm_cluster.env, LARCH_CA=str(pki["other"]))
    server = TlsServer(tmp_path, pki["ca"],
                       ["--executor", "slurm", "--slurm-poll-ms", "300",
                        "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"]),
                        "--job-ca", str(pki["ca"])], env=env)
    try:
        job_id, stderr = run_job(server, server.alice, "https-slurm")
        assert server.job(job_id)["executor"] == "slurm"
        script = (server.d.state_dir / "jobs" / job_id / "slurm.sh").read_text()
        assert f"\texport LARCH_CA='{pki['ca']}'\n" in script, script
        posts = job_posts(server.d.log(), job_id)
        assert ("metrics", "200") in posts and ("result", "200") in posts, posts
        assert "report:" not in stderr, stderr
    finally:
        server.stop()
        inst = server.d.state_dir / "instance-id"
        if inst.exists():
            slurm_cluster.cancel_named(f"larch-{inst.read_text().strip()}-")


# ---- X-Forwarded-For -------------------------------------------------------------


def logged_client(server, path):
    """The client address of the request line for path in server's log."""
    m = server.wait_log(rf"info  GET {re.escape(path)} 404 \d+us (\S+)$")
    return m.group(1)


def audited_client(server, forwarded, **kw):
    """An audited admin action (a node drain: 409 with the local executor)
    sent with X-Forwarded-For: forwarded; the client its audit entry has."""
    node = socket.gethostname()
    headers = {**server.auth(), "X-Forwarded-For": forwarded}
    r = requests.post(f"{server.url}/v1/nodes/{node}/drain", json={"reason": forwarded},
                      headers=headers, timeout=10, **kw)
    assert r.status_code == 409, r.text
    r = requests.get(server.url + "/v1/audit?action=node.drain", headers=server.auth(),
                     timeout=10, **kw)
    e = r.json()["entries"][0]
    assert e["args"] == {"reason": forwarded}
    return e["client"]


def test_forwarded_for_ignored_from_untrusted_peers(tls, pki):
    """Without trusted_proxies a spoofed header changes nothing: log, audit."""
    requests.get(tls.url + "/xff-spoof", headers={"X-Forwarded-For": "203.0.113.9"},
                 verify=str(pki["ca"]), timeout=10)
    assert logged_client(tls, "/xff-spoof") == "127.0.0.1"
    assert audited_client(tls, "203.0.113.9", verify=str(pki["ca"])) == "127.0.0.1"


def test_forwarded_for_from_a_trusted_proxy(tmp_path):
    server = Larchd(tmp_path, args=["--trusted-proxies", "127.0.0.1, 10.0.0.0/8"]).start()
    try:
        cases = {
            "/xff-none": None,                                       # the peer
            "/xff-one": "203.0.113.9",
            "/xff-chain": "198.51.100.1, 203.0.113.9",               # right-most
            "/xff-proxies": "198.51.100.1, 203.0.113.9, 10.1.2.3",   # past trusted hops
            "/xff-port": "[2001:db8::5]:4711",
            "/xff-garbage": "203.0.113.9, not-an-address",           # nothing believed
            "/xff-garbage-hop": "203.0.113.9, bad, 10.1.2.3",        # the last good hop
        }
        for path, value in cases.items():
            headers = {"X-Forwarded-For": value} if value else {}
            requests.get(server.url + path, headers=headers, timeout=10)
        want = {"/xff-none": "127.0.0.1", "/xff-one": "203.0.113.9",
                "/xff-chain": "203.0.113.9", "/xff-proxies": "203.0.113.9",
                "/xff-port": "2001:db8::5", "/xff-garbage": "127.0.0.1",
                "/xff-garbage-hop": "10.1.2.3"}
        assert {p: logged_client(server, p) for p in cases} == want
        # two headers read as one list, the last one right-most
        s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        s.sendall(b"GET /xff-two HTTP/1.1\r\nHost: x\r\nX-Forwarded-For: 198.51.100.1\r\n"
                  b"X-Forwarded-For: 203.0.113.7\r\nConnection: close\r\n\r\n")
        while s.recv(4096):
            pass
        s.close()
        assert logged_client(server, "/xff-two") == "203.0.113.7"
        assert audited_client(server, "198.51.100.1, 203.0.113.5") == "203.0.113.5"
    finally:
        server.stop()


def test_trusted_proxies_bad_value_is_exit_2(tmp_path):
    code, err = start_fails(tmp_path, "--trusted-proxies", "10.0.0.0/33")
    assert code == 2
    assert err == ('larchd: --trusted-proxies: "10.0.0.0/33" is not loopback, any, or an IP '
                   'address or network (ADDR/BITS)\n')
