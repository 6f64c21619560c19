"""The larch command-line client (service/cli) driven as a user would, against a
real larchd running real (tiny) training jobs: every command and option, human
and --json output, exit statuses and messages (connection refused, 401, 403,
404, 409, a refused spec), where the server and token come from (flags,
LARCH_URL/LARCH_TOKEN, the 0600 config file), and a stand-in server with
hostile text to show that nothing it sends reaches the terminal raw."""
import http.server
import json
import os
import pty
import re
import socket
import subprocess
import time

import pytest

from larchd import BUILD, Larchd, StubServer, send_json

EXIT_OK, EXIT_REFUSED, EXIT_USAGE, EXIT_UNREACHABLE = 0, 1, 2, 3
JOB_ID = re.compile(r"^j-\d{6}$")
COMMANDS = ("submit", "ls", "show", "logs", "metrics", "cancel", "watch")

TINY = {"name": "tiny", "model": {"type": "mlp", "hidden": [16]}, "data": {"name": "fashion-mnist"},
        "batch": {"global": 256}, "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 30,
        "log_every": 5}
LONG = dict(TINY, name="long", steps=100000)


def failing_spec(d):
    """A spec larchd takes (its files' headers are fine) and larch-train then
    fails at once: the image file stops after 10 of the 300 images its header
    promises. The files are in d, readable by every user."""
    import struct
    images, labels = d / "train-images-idx3-ubyte", d / "train-labels-idx1-ubyte"
    images.write_bytes(struct.pack(">IIII", 0x803, 300, 28, 28) + bytes(10 * 28 * 28))
    labels.write_bytes(struct.pack(">II", 0x801, 300) + bytes(i % 10 for i in range(300)))
    for f in (images, labels):
        f.chmod(0o644)
    return dict(TINY, name="no-data", data={"format": "idx", "train": {
        "images": str(images), "labels": str(labels)}})

# what a terminal must never get raw: CSI, OSC with BEL, CR, a newline, a C1 CSI,
# a right-to-left override, and shell syntax (harmless text, shown as it is)
HOSTILE = "evil\x1b[2J\x1b]0;pwned\x07\nID  fake\r$(rm -rf ~);`id`|&\u202e\u009b31m"
RAW = ("\x1b", "\x07", "\r", "\u202e", "\u009b")


def larch_exe():
    exe = BUILD / "service" / "larch"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build with -DWITH_SERVICE=ON first")
    return exe


def clean_env(home, url=None, token=None, **more):
    """The environment of a user with HOME=home and nothing of larch's set."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("LARCH_") and k not in ("XDG_CONFIG_HOME", "COLUMNS")}
    env["HOME"] = str(home)
    if url:
        env["LARCH_URL"] = url
    if token:
        env["LARCH_TOKEN"] = token
    env.update(more)
    return env


def run(env, *args, input=None, timeout=30):
    return subprocess.run([str(larch_exe())] + [str(a) for a in args], env=env, input=input,
                          capture_output=True, text=True, timeout=timeout)


def dead_url():
    """A URL nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def write_secret(path, text, mode=0o600):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)
    return path


def table(stdout):
    """A human table's lines split on runs of 2+ spaces."""
    return [re.split(r" {2,}", line.strip()) for line in stdout.splitlines()]


class Site:
    """One larchd for the module, a user token each for alice and bob, and
    alice's jobs submitted at the start so that they run while other tests do."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.server = Larchd(tmp, args=["--max-local-jobs", "4", "--cancel-grace", "10"]).start()
        self.url = self.server.url
        self.alice = self.token("alice")
        self.bob = self.token("bob")
        self.home = tmp / "home"
        self.home.mkdir()
        self.failing = failing_spec(tmp)
        self.failing_images = self.failing["data"]["train"]["images"]
        self.tiny_spec = tmp / "tiny.json"
        self.tiny_spec.write_text(json.dumps(TINY))
        out = self.larch("submit", self.tiny_spec)
        assert out.returncode == EXIT_OK, out.stderr
        self.tiny = out.stdout.strip()
        assert JOB_ID.match(self.tiny), out.stdout

    def token(self, user):
        out = subprocess.run([str(self.server.exe), "token", "create", "--user", user, "--role",
                              "user", "--state-dir", str(self.server.state_dir)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def env(self, token=None, **more):
        return clean_env(self.home, self.url, token or self.alice, **more)

    def larch(self, *args, token=None, input=None, timeout=30):
        return run(self.env(token), *args, input=input, timeout=timeout)

    def wait_final(self, job, timeout=60):
        """Waits for job to end (larch watch); returns watch's CompletedProcess."""
        return self.larch("watch", "--interval", "0.2", job, timeout=timeout)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("cli"))
    yield s
    if s.server.running():
        s.server.stop()


@pytest.fixture(scope="module")
def tiny_done(site):
    """alice's tiny job, COMPLETED; larch watch saw it to the end with exit 0."""
    out = site.wait_final(site.tiny)
    assert out.returncode == EXIT_OK, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines and all(line.startswith(site.tiny + "  ") for line in lines), out.stdout
    assert re.search(r"  COMPLETED  step 30/30 \(100%\)  loss \d\.\d+  in \d+s$", lines[-1])
    return site.tiny


# ---- help and usage ---------------------------------------------------------------------


def test_global_help_lists_every_command(tmp_path):
    out = run(clean_env(tmp_path), "--help")
    assert out.returncode == EXIT_OK and out.stderr == ""
    assert out.stdout.startswith("usage: larch ")
    for cmd in COMMANDS:
        assert re.search(rf"^  {cmd} +\S", out.stdout, re.M), cmd
    assert "LARCH_URL" in out.stdout and "LARCH_TOKEN" in out.stdout
    assert "~/.config/larch/config, mode 0600" in out.stdout
    version = run(clean_env(tmp_path), "--version")
    assert version.returncode == EXIT_OK
    assert re.match(r"^larch \S+( \(git \w+\))?\n$", version.stdout)


@pytest.mark.parametrize("cmd, options", [
    ("submit", ["SPEC.json|-", "standard input", "--idempotency-key"]),
    ("ls", ["--state S", "--name N", "--owner U", "--limit N", "--all"]),
    ("show", ["ID"]),
    ("logs", ["--stream", "-f, --follow", "--interval"]),
    ("metrics", ["--name N", "--from S", "--to S", "--max-points N", "--csv"]),
    ("cancel", ["ID"]),
    ("watch", ["--interval", "Exit status 0 when it COMPLETED"]),
])
def test_command_help(tmp_path, cmd, options):
    for flag in ("--help", "-h"):
        # no server is needed (none is running at this URL) to ask for help
        out = run(clean_env(tmp_path, url=dead_url()), cmd, flag)
        assert out.returncode == EXIT_OK and out.stderr == "", out.stderr
        assert out.stdout.startswith(f"usage: larch {cmd} ")
        for text in options + ["--json", "--url URL", "--token-file FILE"]:
            assert text in out.stdout, (cmd, text)


@pytest.mark.parametrize("args, message", [
    (["frobnicate"], 'larch: unknown command "frobnicate"'),
    (["fro\x1b[2Jb"], 'larch: unknown command "fro\\x1b[2Jb"'),
    ([], "usage: larch "),
    (["show"], "larch show: a job id is required"),
    (["show", "j-000001", "j-000002"], "larch show: one job id, not 2"),
    (["cancel"], "larch cancel: a job id is required"),
    (["ls", "extra"], 'larch ls: unexpected argument "extra"'),
    (["ls", "--bogus"], "usage: larch ls "),
    (["ls", "--limit", "0"], "--limit: must be an integer in [1, 500]"),
    (["ls", "--state", "X" * 40], "--state: no state is called that"),
    (["submit"], "one spec file (or - for standard input) is required"),
    (["submit", "--idempotency-key", "a b", "x.json"], "--idempotency-key: 1 to 128"),
    (["logs", "--stream", "stdin", "j-000001"], "--stream: stdout or stderr"),
    (["logs", "--interval", "0", "j-000001"], "--interval: must be a number in"),
    (["metrics", "--max-points", "0", "j-000001"], "--max-points: must be an integer"),
    (["metrics", "--from", "x", "j-000001"], "--from: must be an integer"),
    (["watch"], "larch watch: one job id is required"),
])
def test_bad_command_lines(tmp_path, args, message):
    out = run(clean_env(tmp_path, url=dead_url()), *args)
    assert out.returncode == EXIT_USAGE, out
    assert message in out.stderr
    assert "\x1b" not in out.stderr and out.stdout == ""


def test_submit_refuses_bad_local_input_before_connecting(tmp_path):
    env = clean_env(tmp_path, url=dead_url())     # exit 2, not 3: larchd is never asked
    out = run(env, "submit", "-", input='{"name": "t",')
    assert out.returncode == EXIT_USAGE
    assert out.stderr.startswith("larch: standard input: invalid JSON at line 1")
    out = run(env, "submit", "-", input="[1, 2]")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == "larch: standard input: a job spec is a JSON object\n"
    out = run(env, "submit", tmp_path / "missing.json")
    assert out.returncode == EXIT_USAGE
    assert f"{tmp_path / 'missing.json'}: No such file or directory" in out.stderr


# ---- where the server and the token come from -------------------------------------------


def test_connection_refused_names_the_url(tmp_path):
    url = dead_url()
    for args in (["ls"], ["show", "j-000001"], ["watch", "j-000001"], ["logs", "-f", "j-000001"]):
        out = run(clean_env(tmp_path, url=url, token="lt_" + "0" * 64), *args)
        assert out.returncode == EXIT_UNREACHABLE, (args, out)
        assert out.stderr == (f"larch: cannot reach larchd at {url}: connection refused "
                              "(is larchd running?)\n")
    out = run(clean_env(tmp_path, url="ftp://example.org"), "ls")
    assert out.returncode == EXIT_USAGE
    assert 'the server URL "ftp://example.org" is not an http:// or https:// URL' in out.stderr


def test_token_refused_401(site):
    out = site.larch("ls", token="lt_" + "0" * 64)
    assert out.returncode == EXIT_REFUSED and out.stdout == ""
    assert out.stderr.startswith("larch: the token was refused (401): set LARCH_TOKEN")
    assert "(this one came from LARCH_TOKEN)" in out.stderr
    # no token anywhere
    out = run(clean_env(site.home, site.url), "show", site.tiny)
    assert out.returncode == EXIT_REFUSED
    config = site.home / ".config" / "larch" / "config"
    assert out.stderr == ("larch: larchd wants a token (401): set LARCH_TOKEN, pass --token-file "
                          f'FILE or put "token = ..." in {config}\n')
    # a token that cannot go into a header is stopped before it is sent
    out = site.larch("ls", token="lt_12 34")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == ("larch: the token from LARCH_TOKEN is not one word of printable "
                          "characters\n")


def test_config_file(site, tmp_path):
    home = tmp_path / "home"
    config = write_secret(home / ".config" / "larch" / "config",
                          f"# larch\n\nurl = {site.url}/\ntoken =  {site.alice}  \n")
    out = run(clean_env(home), "ls", "--json")
    assert out.returncode == EXIT_OK, out.stderr
    assert site.tiny in [j["id"] for j in json.loads(out.stdout)["jobs"]]

    # a token file others may read is refused, like ssh's private keys
    for mode in (0o644, 0o640, 0o604, 0o620):
        config.chmod(mode)
        out = run(clean_env(home), "ls")
        assert out.returncode == EXIT_USAGE and out.stdout == ""
        assert out.stderr == (f"larch: permissions {mode:04o} for {config} are too open: it "
                              "holds a token, so others must not read or change it "
                              f"(chmod 600 {config})\n")
    config.chmod(0o400)
    assert run(clean_env(home), "ls").returncode == EXIT_OK

    # XDG_CONFIG_HOME wins over HOME
    xdg = write_secret(tmp_path / "xdg" / "larch" / "config", f"url = {dead_url()}\n")
    out = run(clean_env(home, XDG_CONFIG_HOME=str(tmp_path / "xdg")), "ls")
    assert out.returncode == EXIT_UNREACHABLE
    xdg.chmod(0o666)
    out = run(clean_env(home, XDG_CONFIG_HOME=str(tmp_path / "xdg")), "ls")
    assert out.returncode == EXIT_USAGE and f"for {xdg} are too open" in out.stderr

    config.chmod(0o600)
    config.write_text(f"url = {site.url}\nserver = x\n")
    out = run(clean_env(home), "ls")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == f'larch: {config}:2: unknown key "server" (known: url, token, ca)\n'
    config.write_text("url\n")
    out = run(clean_env(home), "ls")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == f'larch: {config}:1: expected "key = value"\n'
    config.write_text("token =\n")
    out = run(clean_env(home, url=site.url), "ls")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == f"larch: the token from {config} is empty\n"


def test_url_precedence(site, tmp_path):
    """--url > LARCH_URL > the config file > http://127.0.0.1:8080."""
    home, dead = tmp_path / "home", dead_url()
    write_secret(home / ".config" / "larch" / "config", f"url = {dead}\n")
    token = {"LARCH_TOKEN": site.alice}

    def ls(env_url, *flags):
        env = clean_env(home, env_url, **token)
        return run(env, *flags, "ls")
    assert ls(None).returncode == EXIT_UNREACHABLE            # the config's
    assert ls(site.url).returncode == EXIT_OK                 # LARCH_URL over the config
    out = ls(site.url, "--url", dead)                         # --url over LARCH_URL
    assert out.returncode == EXIT_UNREACHABLE and f"at {dead}:" in out.stderr
    assert ls(dead, "--url", site.url).returncode == EXIT_OK
    out = run(clean_env(home, dead, **token), "ls", "--url", site.url, "--json")
    assert out.returncode == EXIT_OK                          # also after the command
    assert json.loads(out.stdout)["jobs"]
    (home / ".config" / "larch" / "config").unlink()
    out = ls(None)                                            # the default
    assert out.returncode in (EXIT_UNREACHABLE, EXIT_REFUSED)
    if out.returncode == EXIT_UNREACHABLE:
        assert "at http://127.0.0.1:8080:" in out.stderr


def test_token_precedence(site, tmp_path):
    """--token-file > LARCH_TOKEN > the config file."""
    home, bad = tmp_path / "home", "lt_" + "f" * 64
    config = write_secret(home / ".config" / "larch" / "config",
                          f"url = {site.url}\ntoken = {bad}\n")
    good_file = write_secret(tmp_path / "good.token", site.alice + "\n")
    bad_file = write_secret(tmp_path / "bad.token", bad)

    out = run(clean_env(home), "ls")
    assert out.returncode == EXIT_REFUSED and f"(this one came from {config})" in out.stderr
    assert run(clean_env(home, token=site.alice), "ls").returncode == EXIT_OK
    assert run(clean_env(home, token=bad), "--token-file", good_file, "ls").returncode == EXIT_OK
    out = run(clean_env(home, token=site.alice), "ls", "--token-file", bad_file)
    assert out.returncode == EXIT_REFUSED
    assert f"(this one came from --token-file {bad_file})" in out.stderr
    # which user the token is: bob's from LARCH_TOKEN beats alice's from the config
    config.write_text(f"url = {site.url}\ntoken = {site.alice}\n")
    out = run(clean_env(home, token=site.bob), "show", site.tiny)
    assert out.returncode == EXIT_REFUSED and f"job {site.tiny} not found" in out.stderr
    assert run(clean_env(home), "show", site.tiny).returncode == EXIT_OK
    # the token file is a secret too
    good_file.chmod(0o644)
    out = run(clean_env(home), "ls", "--token-file", good_file)
    assert out.returncode == EXIT_USAGE and f"permissions 0644 for {good_file}" in out.stderr
    out = run(clean_env(home), "ls", "--token-file", tmp_path / "none")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == f"larch: --token-file {tmp_path / 'none'}: No such file or directory\n"


# ---- the commands on real jobs ----------------------------------------------------------


def test_watch_completed_exits_0(tiny_done, site):
    # once ended, watch prints the one final line and exits with the job's verdict
    out = site.larch("watch", tiny_done)
    assert out.returncode == EXIT_OK
    assert len(out.stdout.splitlines()) == 1 and "  COMPLETED  " in out.stdout
    out = site.larch("watch", "--json", tiny_done)
    assert out.returncode == EXIT_OK
    [job] = [json.loads(line) for line in out.stdout.splitlines()]
    assert job["id"] == tiny_done and job["state"] == "COMPLETED"


def test_watch_on_a_terminal_redraws_one_line(tiny_done, site):
    primary, secondary = pty.openpty()
    try:
        proc = subprocess.Popen([str(larch_exe()), "watch", tiny_done], env=site.env(),
                                stdin=subprocess.DEVNULL, stdout=secondary,
                                stderr=subprocess.DEVNULL)
        os.close(secondary)
        assert proc.wait(timeout=30) == EXIT_OK
        out = b""
        while True:
            try:
                chunk = os.read(primary, 4096)
            except OSError:          # EIO: the other side is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(primary)
    text = out.decode()
    assert re.match(rf"^\r{tiny_done}  COMPLETED  step 30/30 .*\x1b\[K\r?\n$", text), repr(text)


def test_show(tiny_done, site):
    out = site.larch("show", tiny_done)
    assert out.returncode == EXIT_OK, out.stderr
    fields = dict(re.match(r"^(\w[\w ]*): +(.*)$", line).groups()
                  for line in out.stdout.split("spec:\n")[0].splitlines())
    assert fields["id"] == tiny_done and fields["name"] == "tiny" and fields["owner"] == "alice"
    assert fields["state"] == "COMPLETED" and fields["exit code"] == "0"
    assert fields["progress"].startswith("step 30/30 (100%), loss ")
    assert re.match(r"^\d{4}-\d\d-\d\dT[\d:.]+Z \(\d+[smhd] ago\)$", fields["ended"])
    spec = json.loads(out.stdout.split("spec:\n")[1])
    assert spec["steps"] == 30 and spec["batch"]["micro"] == 256     # the effective spec
    assert '"lr": 0.1,' in out.stdout                                 # as a person wrote it
    out = site.larch("--json", "show", tiny_done)           # a global option too
    assert out.returncode == EXIT_OK
    job = json.loads(out.stdout)
    assert job["id"] == tiny_done and job["state"] == "COMPLETED" and job["spec"]["steps"] == 30


def test_ls_table_json_and_filters(tiny_done, site):
    out = site.larch("ls")
    assert out.returncode == EXIT_OK, out.stderr
    rows = table(out.stdout)
    assert rows[0] == ["ID", "NAME", "OWNER", "STATE", "STEP/TOTAL", "LOSS", "AGE"]
    row = next(r for r in rows if r[0] == tiny_done)
    assert row[1:5] == ["tiny", "alice", "COMPLETED", "30/30"]
    assert re.match(r"^\d\.\d+$", row[5]) and re.match(r"^\d+[smhd]$", row[6])

    out = site.larch("ls", "--json", "--state", "completed")          # any case
    assert out.returncode == EXIT_OK
    jobs = json.loads(out.stdout)["jobs"]
    assert tiny_done in [j["id"] for j in jobs]
    assert {j["state"] for j in jobs} == {"COMPLETED"}
    out = site.larch("ls", "--state", "QUEUED", "--json")
    assert tiny_done not in [j["id"] for j in json.loads(out.stdout)["jobs"]]
    out = site.larch("ls", "--name", "tiny")
    assert [r[1] for r in table(out.stdout)[1:]] == ["tiny"]
    out = site.larch("ls", "--state", "bogus")
    assert out.returncode == EXIT_REFUSED
    assert out.stderr.startswith('larch: larchd refused the request (400 bad_request): state: ')

    # pages: --limit shows one and says there is more; --all follows the cursors
    second = site.larch("submit", "-", input=json.dumps(site.failing))      # a second job
    assert second.returncode == EXIT_OK, second.stderr
    out = site.larch("ls", "--limit", "1")
    assert out.returncode == EXIT_OK and len(out.stdout.splitlines()) == 2
    assert out.stderr == "larch: there are more jobs: --all lists them all\n"
    out = site.larch("ls", "--all", "--limit", "1", "--json")
    assert out.returncode == EXIT_OK and out.stderr == ""
    listed = json.loads(out.stdout)
    assert "next_cursor" not in listed and len(listed["jobs"]) >= 2
    ids = [j["id"] for j in listed["jobs"]]
    assert ids == sorted(ids, reverse=True) and tiny_done in ids       # newest first
    # bob sees none of alice's; a user may not ask for another's (403)
    out = site.larch("ls", "--json", token=site.bob)
    assert out.returncode == EXIT_OK and json.loads(out.stdout)["jobs"] == []
    out = site.larch("ls", "--owner", "alice", token=site.bob)
    assert out.returncode == EXIT_REFUSED
    assert out.stderr.startswith("larch: not allowed (403): ")


def test_logs(tiny_done, site):
    out = site.larch("logs", tiny_done)
    assert out.returncode == EXIT_OK, out.stderr
    assert re.search(r"^step 30/30 \| .*loss ", out.stdout, re.M)
    assert out.stdout.endswith("\n") and "done: 30 steps" in out.stdout
    out_json = site.larch("logs", "--json", tiny_done)
    pieces = [json.loads(line) for line in out_json.stdout.splitlines()]
    assert "".join(p["data"] for p in pieces) == out.stdout
    assert pieces[-1]["next_offset"] == pieces[-1]["size"]
    assert {p["stream"] for p in pieces} == {"stdout"}
    # the last lines, as tail -n
    for n in (1, 3):
        last = site.larch("logs", "--tail", str(n), tiny_done)
        assert last.returncode == EXIT_OK, last.stderr
        assert last.stdout == "".join(out.stdout.splitlines(keepends=True)[-n:])
    big = site.larch("logs", "-n", "100000", tiny_done)
    assert big.returncode == EXIT_OK and big.stdout == out.stdout
    for bad in ("0", "-2", "1.5", "x"):
        r = site.larch("logs", "--tail", bad, tiny_done)
        assert r.returncode == EXIT_USAGE and "--tail" in r.stderr, (bad, r.stderr)
    err = site.larch("logs", "--stream", "stderr", "--json", tiny_done)
    assert err.returncode == EXIT_OK
    assert {json.loads(line)["stream"] for line in err.stdout.splitlines()} <= {"stderr"}


def test_metrics(tiny_done, site):
    out = site.larch("metrics", tiny_done)
    assert out.returncode == EXIT_OK, out.stderr
    lines = out.stdout.splitlines()
    head = lines[0].split()
    assert head[0] == "STEP" and "train/loss" in head and head[1:] == sorted(head[1:])
    assert [line.split()[0] for line in lines[1:]] == [str(s) for s in range(1, 31)]
    assert all(line == line.rstrip() for line in lines)

    out = site.larch("metrics", "--csv", "--name", "train/loss", "--name", "train/lr", tiny_done)
    assert out.returncode == EXIT_OK
    rows = [line.split(",") for line in out.stdout.splitlines()]
    assert rows[0] == ["step", "train/loss", "train/lr"]
    assert [int(r[0]) for r in rows[1:]] == list(range(1, 31))
    assert all(float(r[2]) == pytest.approx(0.1) for r in rows[1:])
    csv_loss = {int(r[0]): float(r[1]) for r in rows[1:]}

    out = site.larch("metrics", "--json", "--name", "train/loss", "--from", "10", "--to", "20",
                     tiny_done)
    series = json.loads(out.stdout)["series"]
    assert list(series) == ["train/loss"]
    assert [p[0] for p in series["train/loss"]] == list(range(10, 21))
    assert all(csv_loss[s] == pytest.approx(v, rel=1e-8) for s, v in series["train/loss"])

    out = site.larch("metrics", "--max-points", "4", "--name", "train/loss", tiny_done)
    assert out.returncode == EXIT_OK
    assert 2 <= len(out.stdout.splitlines()) - 1 <= 4
    out = site.larch("metrics", "--name", "no/such", "--name", "train/lr", tiny_done)
    assert out.returncode == EXIT_OK
    assert out.stdout.splitlines()[0].split() == ["STEP", "train/lr"]
    assert out.stderr == f'larch: job {tiny_done} has no metric "no/such"\n'


def test_submit_from_stdin_json_and_a_failed_job(site):
    text = json.dumps(site.failing)
    out = site.larch("submit", "-", "--json", "--idempotency-key", "fail-1", input=text)
    assert out.returncode == EXIT_OK, out.stderr
    job = json.loads(out.stdout)
    assert JOB_ID.match(job["id"]) and job["name"] == "no-data" and job["owner"] == "alice"
    # the same key and body: the same job, nothing new; another body: 409
    again = site.larch("submit", "-", "--idempotency-key", "fail-1", input=text)
    assert again.returncode == EXIT_OK and again.stdout == job["id"] + "\n"
    assert "nothing new was created" in again.stderr
    other = site.larch("submit", site.tiny_spec, "--idempotency-key", "fail-1")
    assert other.returncode == EXIT_REFUSED
    assert other.stderr == ("larch: the idempotency key fail-1 was used before with another "
                            "spec (409)\n")

    out = site.wait_final(job["id"])
    assert out.returncode == EXIT_REFUSED, out.stdout + out.stderr
    last = out.stdout.splitlines()[-1]
    assert last.startswith(f"{job['id']}  FAILED  ") and site.failing_images in last
    err = site.larch("logs", "--stream", "stderr", job["id"])
    assert err.returncode == EXIT_OK and site.failing_images in err.stdout


@pytest.mark.parametrize("spec, message", [
    (dict(TINY, batch={"global": 0}), "batch.global: must be an integer in "),
    (dict(TINY, model={"type": "mlp", "hiden": [16]}), 'model: unknown field "hiden"'),
    (dict(TINY, optimizer={"type": "sgd", "lr": "fast"}), "optimizer.lr: must be a number"),
])
def test_refused_spec_names_the_field(site, spec, message):
    out = site.larch("submit", "-", input=json.dumps(spec))
    assert out.returncode == EXIT_REFUSED and out.stdout == ""
    assert out.stderr.startswith("larch: the spec was refused: " + message), out.stderr
    assert out.stderr.count("\n") == 1


def test_job_names_with_shell_and_control_characters(site, tmp_path):
    """larchd refuses such names (400, naming the field); the message that
    quotes the name reaches the terminal as one inert line."""
    spec = write_secret(tmp_path / "evil.json", json.dumps(dict(TINY, name=HOSTILE)))
    out = site.larch("submit", spec)
    assert out.returncode == EXIT_REFUSED and out.stdout == ""
    assert out.stderr.startswith("larch: the spec was refused: name: must be 1-")
    assert "$(rm -rf ~);`id`|&" in out.stderr
    assert out.stderr.count("\n") == 1 and not any(c in out.stderr for c in RAW)


def test_not_found_404(tiny_done, site):
    """An unknown id and another user's job read the same."""
    for job, token in (("j-999999", site.alice), (tiny_done, site.bob)):
        for args in (["show"], ["logs"], ["logs", "-f"], ["metrics"], ["cancel"], ["watch"]):
            out = site.larch(*args, job, token=token)
            assert out.returncode == EXIT_REFUSED, (job, args, out)
            assert out.stderr == f"larch: job {job} not found\n" and out.stdout == ""
    # bob's cancel did nothing
    assert json.loads(site.larch("show", "--json", tiny_done).stdout)["state"] == "COMPLETED"


def test_follow_watch_and_cancel_a_running_job(site, tmp_path):
    spec = write_secret(tmp_path / "long.json", json.dumps(LONG))
    out = site.larch("submit", spec)
    assert out.returncode == EXIT_OK, out.stderr
    job = out.stdout.strip()
    env = site.env()
    follow = subprocess.Popen([str(larch_exe()), "logs", "-f", "--interval", "0.2", job], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    watch = subprocess.Popen([str(larch_exe()), "watch", "--interval", "0.2", job], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # watch's line shows the step, the loss and an ETA while the job runs
        seen = []
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = watch.stdout.readline()
            assert line, f"watch ended early: {seen} {watch.stderr.read()}"
            seen.append(line)
            if re.search(r"  RUNNING  step \d+/100000 \(\d+%\)  loss \d\.\d+ .* eta \S*\d[smhd]",
                         line):
                break
        else:
            pytest.fail(f"no progress line with a loss and an ETA: {seen}")
        assert follow.poll() is None                    # still following

        out = site.larch("cancel", job)
        assert out.returncode == EXIT_OK, out.stderr
        assert out.stdout == f"{job}: cancelling (RUNNING: it ends after writing a checkpoint)\n"

        rest, err = watch.communicate(timeout=30)
        assert watch.returncode == EXIT_REFUSED, err
        assert re.search(rf"^{job}  CANCELLED  .*: cancelled by alice$", rest.splitlines()[-1])
        logs, err = follow.communicate(timeout=30)
        assert follow.returncode == EXIT_OK, err
    finally:
        for p in (follow, watch):
            if p.poll() is None:
                p.kill()
                p.communicate()
    # -f printed what the job wrote, to its last line
    assert re.search(r"^step \d+/100000 \| ", logs, re.M)
    whole = site.larch("logs", job)
    assert whole.returncode == EXIT_OK and logs == whole.stdout and logs.endswith("\n")

    # a second cancel: the job has ended (409)
    out = site.larch("cancel", job)
    assert out.returncode == EXIT_REFUSED and out.stdout == ""
    assert out.stderr == f"larch: job {job} already finished (CANCELLED): nothing to cancel (409)\n"
    out = site.larch("cancel", "--json", job)
    assert out.returncode == EXIT_REFUSED and out.stdout == ""
    out = site.larch("ls", "--state", "cancelled")
    assert [r[0] for r in table(out.stdout)[1:]] == [job]


def test_cancel_json_of_a_queued_job(site, tmp_path):
    """--json gives the job; one cancelled before it runs ends at once."""
    spec = write_secret(tmp_path / "long.json", json.dumps(dict(LONG, name="queued")))
    job = site.larch("submit", spec).stdout.strip()
    out = site.larch("cancel", "--json", job)
    assert out.returncode == EXIT_OK, out.stderr
    body = json.loads(out.stdout)
    assert body["id"] == job and body["state"] in ("CANCELLED", "PENDING", "QUEUED", "RUNNING")
    out = site.wait_final(job)
    assert out.returncode == EXIT_REFUSED and "  CANCELLED  " in out.stdout.splitlines()[-1]


# ---- hostile text from the server never reaches the terminal raw ------------------------


class FakeLarchd(StubServer):
    """Answers GET/POST path -> (status, JSON body); anything else 404."""

    def __init__(self, routes):
        outer = self
        self.routes = routes

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self):
                if self.command == "POST":
                    self.rfile.read(int(self.headers.get("Content-Length", 0)))
                path = self.path.split("?")[0]
                missing = (404, {"error": {"code": "not_found", "message": HOSTILE}})
                status, body = outer.routes.get((self.command, self.path),
                                                outer.routes.get((self.command, path), missing))
                data = json.dumps(body).encode()
                send_json(self, status, data)

            do_GET = do_POST = answer

        self.serve(Handler)


@pytest.fixture
def hostile(tmp_path):
    job = {"id": "j-000001", "name": HOSTILE, "owner": "mal\x1b[1mlory", "state": "FAILED",
           "executor": "local", "slurm_job_id": None, "priority": 0, "attempt": 1,
           "created_at": "2026-11-22T23:01:02.123Z", "started_at": "2026-11-22T23:01:03.001Z",
           "ended_at": "2026-11-22T23:01:09.001Z", "exit_code": 1, "reason": HOSTILE,
           "spec": {"name": HOSTILE, "steps": 10},
           "progress": {"step": 5, "total_steps": 10, "train/loss": 0.5}}
    server = FakeLarchd({
        ("GET", "/v1/jobs"): (200, {"jobs": [job]}),
        ("GET", "/v1/jobs/j-000001"): (200, job),
        ("POST", "/v1/jobs/j-000001/cancel"): (200, dict(job, state="CANCEL\x1b[8mLED")),
        ("GET", "/v1/jobs/j-000001/metrics"): (200, {"series": {HOSTILE: [[1, 0.5]],
                                                                "train/loss": [[1, 2.0]]}}),
        ("POST", "/v1/jobs"): (400, {"error": {"code": "invalid_spec", "message": HOSTILE}}),
        ("GET", "/v1/jobs?state=X"): (400, {"error": {"code": "bad_request", "message": HOSTILE}}),
    })
    yield clean_env(tmp_path, server.url, "lt_" + "a" * 64)
    server.close()


def assert_inert(text, lines):
    assert not any(c in text for c in RAW), repr(text)
    assert len(text.splitlines()) == lines, text
    assert "\\x1b[2J" in text and "$(rm -rf ~);`id`|&" in text


def test_hostile_text_is_shown_inert(hostile, tmp_path):
    out = run(hostile, "ls")
    assert out.returncode == EXIT_OK, out.stderr
    assert_inert(out.stdout, 2)
    assert "mal\\x1b[1mlory" in out.stdout and "\\n" in out.stdout and "\\u202e" in out.stdout
    rows = table(out.stdout)
    assert rows[1][0] == "j-000001" and rows[1][-5:-2] == ["mal\\x1b[1mlory", "FAILED", "5/10"]

    out = run(dict(hostile, COLUMNS="60"), "ls")       # the name gives way, still inert
    assert not any(c in out.stdout for c in RAW)
    assert all(len(line) <= 62 for line in out.stdout.splitlines()), out.stdout

    out = run(hostile, "show", "j-000001")
    assert out.returncode == EXIT_OK
    assert not any(c in out.stdout for c in RAW)
    assert "$(rm -rf ~);`id`|&" in out.stdout and "\\x1b[2J" in out.stdout
    assert sum(line.startswith("name:") for line in out.stdout.splitlines()) == 1

    out = run(hostile, "watch", "j-000001")
    assert out.returncode == EXIT_REFUSED
    assert_inert(out.stdout, 1)

    out = run(hostile, "cancel", "j-000001")
    assert out.returncode == EXIT_OK and "CANCEL\\x1b[8mLED" in out.stdout
    assert not any(c in out.stdout for c in RAW)

    out = run(hostile, "metrics", "j-000001")
    assert out.returncode == EXIT_OK
    assert not any(c in out.stdout for c in RAW) and len(out.stdout.splitlines()) == 2

    spec = write_secret(tmp_path / "s.json", "{}")
    out = run(hostile, "submit", spec)
    assert out.returncode == EXIT_REFUSED
    assert out.stderr.startswith("larch: the spec was refused: evil\\x1b[2J")
    assert_inert(out.stderr, 1)

    out = run(hostile, "logs", "j-000002")        # a 404 names the id, not the message
    assert out.returncode == EXIT_REFUSED and out.stderr == "larch: job j-000002 not found\n"
    out = run(hostile, "ls", "--state", "x")
    assert out.returncode == EXIT_REFUSED
    assert out.stderr.startswith("larch: larchd refused the request (400 bad_request): evil\\x1b")
    assert_inert(out.stderr, 1)
