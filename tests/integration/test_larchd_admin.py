"""larchd's first admin token, `larchd token ...` and `larchd db ...` against
the real binary: the token file (0600, made once, announced), the state dir
(0700, or 0711 where jobs run as their owners; an open one tightened) and
database files (0600), tokens made,
listed and revoked while larchd serves, roles, only hashes in the database,
db check, an online backup, migrating a database of an older schema, help
and bad usage."""
import os
import pathlib
import re
import select
import signal
import sqlite3
import stat
import subprocess
import time

import pytest
import requests

from larchd import STATE_DIR_MODE, ROOT, Larchd, larchd, larchd_exe  # noqa: F401  (the fixture)

TOKEN = re.compile(r"^lt_[0-9a-f]{64}$")
SPEC = {"name": "admin", "model": {"type": "mlp", "hidden": [16]},
        "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
        "optimizer": {"type": "sgd", "lr": 0.1}, "steps": 10, "log_every": 5}


def cli(state_dir, *args):
    """Runs `larchd ARGS --state-dir STATE_DIR`; returns the CompletedProcess."""
    return subprocess.run([str(larchd_exe()), *args, "--state-dir", str(state_dir)],
                          capture_output=True, text=True, timeout=60)


def run_until_listening(state_dir, log):
    """Starts larchd, waits for its listening line, stops it with SIGTERM;
    returns everything it printed on stdout."""
    with open(log, "ab") as err:
        proc = subprocess.Popen([str(larchd_exe()), "--listen", "127.0.0.1:0", "--state-dir",
                                 str(state_dir)], stdout=subprocess.PIPE, stderr=err)
    out = b""
    deadline = time.monotonic() + 30
    while b"larchd: listening on" not in out:
        left = deadline - time.monotonic()
        assert left > 0, f"no listening line: {out!r}"
        ready, _, _ = select.select([proc.stdout], [], [], left)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 4096)
            assert chunk, f"larchd exited: {out!r} {pathlib.Path(log).read_text()}"
            out += chunk
    proc.send_signal(signal.SIGTERM)
    out += proc.stdout.read()
    proc.stdout.close()
    assert proc.wait(timeout=30) == 0
    return out.decode()


def test_first_start_makes_the_admin_token_once(tmp_path):
    state = tmp_path / "state"
    out = run_until_listening(state, tmp_path / "log")
    path = state / "admin.token"
    assert f"larchd: admin token written to {path}\n" in out
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(state.stat().st_mode) == STATE_DIR_MODE
    token = path.read_text().strip()
    assert TOKEN.match(token)
    assert token not in out                   # the path is printed, not the secret

    out = run_until_listening(state, tmp_path / "log")
    assert "admin token" not in out
    assert path.read_text().strip() == token  # not made again
    # removed: still not made again, as the database has a live admin token
    path.unlink()
    out = run_until_listening(state, tmp_path / "log")
    assert "admin token" not in out and not path.exists()
    listed = cli(state, "token", "list")
    assert listed.returncode == 0, listed.stderr
    assert len([line for line in listed.stdout.splitlines() if " admin " in line]) == 1


def private(path):
    return stat.S_IMODE(path.stat().st_mode) == 0o600


def test_state_dir_and_database_are_private(tmp_path):
    """The database and its -wal and -shm are made 0600 whatever the umask;
    a state dir (and database) left readable by other users, as older
    larchd made them, is tightened at start with a warning saying so."""
    state = tmp_path / "state"
    old = os.umask(0o022)
    try:
        run_until_listening(state, tmp_path / "log")
        assert stat.S_IMODE(state.stat().st_mode) == STATE_DIR_MODE
        db = state / "larch.db"
        assert private(db)
        for name in ("larch.db-wal", "larch.db-shm"):
            assert not (state / name).exists() or private(state / name), name
        # the old way: world-readable
        state.chmod(0o755)
        db.chmod(0o644)
        server = Larchd(tmp_path, state_dir=state).start()
        try:
            assert stat.S_IMODE(state.stat().st_mode) == STATE_DIR_MODE
            assert private(db)
            r = requests.post(server.url + "/v1/jobs", json=SPEC, headers=server.auth())
            assert r.status_code == 201, r.text
            assert private(state / "larch.db-wal") and private(state / "larch.db-shm")
            server.wait_log(rf"warn  state dir {re.escape(str(state))} was mode 0755, open to "
                            rf"other users: now {STATE_DIR_MODE:04o}$")
        finally:
            server.stop()
    finally:
        os.umask(old)
    # a backup is made 0600 too
    dest = tmp_path / "backup.db"
    assert cli(state, "db", "backup", str(dest)).returncode == 0
    assert private(dest)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_state_dir_of_another_user_is_refused(tmp_path):
    """A state dir open to others that belongs to someone else is not
    larchd's to chmod: it refuses to start (exit 1) and says why."""
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    os.chown(state, 65534, 65534)
    r = subprocess.run([str(larchd_exe()), "--listen", "127.0.0.1:0", "--state-dir", str(state)],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 1
    assert (f"larchd: state dir {state}: mode 0755 where larchd wants {STATE_DIR_MODE:04o}, and "
            f"it belongs to "
            f"uid 65534, not to larchd's uid 0") in r.stderr, r.stderr
    assert stat.S_IMODE(state.stat().st_mode) == 0o755 and not list(state.iterdir())


def token_ids(listing):
    """{user: (id, revoked?, role)} from `larchd token list`, job tokens left out."""
    rows = {}
    for line in listing.splitlines()[1:]:
        cols = line.split()
        if cols[2] != "job":
            rows[cols[1]] = (int(cols[0]), cols[-1] != "-", cols[2])
    return rows


def test_tokens_made_listed_and_revoked_while_larchd_runs(larchd):
    state = larchd.state_dir
    made = cli(state, "token", "create", "--user", "bob", "--role", "user")
    assert made.returncode == 0, made.stderr
    bob = made.stdout.strip()
    assert TOKEN.match(bob)
    assert "shown only this once" in made.stderr
    made = cli(state, "token", "create", "--user=carol", "--role=admin")
    assert made.returncode == 0, made.stderr
    carol = made.stdout.strip()

    # roles: a user may use the job API but not the admin routes
    assert requests.get(larchd.url + "/v1/jobs", headers=larchd.auth(bob)).status_code == 200
    assert requests.get(larchd.url + "/metrics", headers=larchd.auth(bob)).status_code == 403
    assert requests.get(larchd.url + "/metrics", headers=larchd.auth(carol)).status_code == 200
    assert requests.get(larchd.url + "/metrics", headers=larchd.auth()).status_code == 200
    assert requests.get(larchd.url + "/v1/jobs").status_code == 401
    r = requests.post(larchd.url + "/v1/jobs", json=SPEC, headers=larchd.auth(bob))
    assert r.status_code == 201, r.text
    assert r.json()["owner"] == "bob"

    listed = cli(state, "token", "list")
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.startswith("ID ")
    for secret in (bob, carol, larchd.admin_token):
        assert secret not in listed.stdout and secret not in listed.stderr
    assert "lt_" not in listed.stdout
    rows = token_ids(listed.stdout)
    assert rows["bob"][2] == "user" and rows["carol"][2] == "admin" and rows["admin"][2] == "admin"
    assert not rows["bob"][1]

    revoked = cli(state, "token", "revoke", str(rows["bob"][0]))
    assert revoked.returncode == 0, revoked.stderr
    # the very next request of the running larchd refuses it
    r = requests.get(larchd.url + "/v1/jobs", headers=larchd.auth(bob))
    assert r.status_code == 401, r.text
    assert r.json()["error"]["code"] == "unauthorized"
    assert requests.get(larchd.url + "/metrics", headers=larchd.auth(carol)).status_code == 200
    assert token_ids(cli(state, "token", "list").stdout)["bob"][1]
    # again: still revoked, exit 0; an unknown id: exit 1
    assert cli(state, "token", "revoke", str(rows["bob"][0])).returncode == 0
    missing = cli(state, "token", "revoke", "999999")
    assert missing.returncode == 1 and "no token 999999" in missing.stderr

    # a user that exists with another role
    clash = cli(state, "token", "create", "--user", "bob", "--role", "admin")
    assert clash.returncode == 1, clash.stderr

    # the database holds hashes only: no secret in its files (WAL included)
    larchd.stop()
    blobs = b"".join(p.read_bytes() for p in state.glob("larch.db*"))
    assert len(blobs) > 0
    for secret in (bob, carol, larchd.admin_token):
        assert secret.encode() not in blobs
        assert secret[3:].encode() not in blobs       # nor its hex digits
    with sqlite3.connect(state / "larch.db") as db:
        hashes = [row[0] for row in db.execute("SELECT hash FROM tokens")]
    assert hashes and all(isinstance(h, bytes) and len(h) == 32 for h in hashes)


def test_db_check_and_backup(larchd, tmp_path):
    ids = []
    for _ in range(3):
        r = requests.post(larchd.url + "/v1/jobs", json=SPEC, headers=larchd.auth())
        assert r.status_code == 201, r.text
        ids.append(int(r.json()["id"][2:]))
    check = cli(larchd.state_dir, "db", "check")
    assert check.returncode == 0, check.stderr
    assert check.stdout == f"larchd: {larchd.state_dir}/larch.db: ok\n"

    dest = tmp_path / "backup.db"
    backup = cli(larchd.state_dir, "db", "backup", str(dest))   # larchd keeps serving
    assert backup.returncode == 0, backup.stderr
    assert requests.get(larchd.url + "/healthz").status_code == 200
    with sqlite3.connect(dest) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert sorted(row[0] for row in db.execute("SELECT id FROM jobs")) == ids
        assert db.execute("SELECT count(*) FROM tokens").fetchone()[0] >= 1
    assert not (tmp_path / "backup.db.tmp").exists()
    assert stat.S_IMODE(dest.stat().st_mode) == 0o600
    # a backup is a database larchd runs on
    restored = tmp_path / "restored"
    restored.mkdir(mode=0o700)
    (restored / "larch.db").write_bytes(dest.read_bytes())
    assert cli(restored, "db", "check").returncode == 0
    listed = cli(restored, "token", "list")
    assert listed.returncode == 0 and " admin " in listed.stdout

    # a corrupt database: exit 1
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "larch.db").write_bytes(b"this is not a database" * 100)
    assert cli(broken, "db", "check").returncode == 1
    # no database at all: exit 1, nothing made
    nothing = tmp_path / "nothing"
    for args in (["db", "check"], ["db", "backup", str(tmp_path / "x.db")], ["token", "list"]):
        r = cli(nothing, *args)
        assert r.returncode == 1 and "no database" in r.stderr, (args, r.stderr)
    assert not nothing.exists()


def migration_sql(version):
    """The SQL of db/migrate.c's step `version`, from its C string literals."""
    source = (ROOT / "db" / "migrate.c").read_text()
    body = source[source.index("migrations[] = {"):source.index("#define N_MIGRATIONS")]
    steps = re.split(r"^\t/\* \d+: ", body, flags=re.M)[1:]
    literals = re.findall(r'"((?:[^"\\]|\\.)*)"', steps[version - 1])
    return "".join(literals).encode().decode("unicode_escape")


def migration_count():
    """How many steps db/migrate.c has."""
    source = (ROOT / "db" / "migrate.c").read_text()
    body = source[source.index("migrations[] = {"):source.index("#define N_MIGRATIONS")]
    return len(re.findall(r"^\t/\* \d+: ", body, flags=re.M))   # a step's opening comment


def test_db_migrate_an_older_schema(tmp_path):
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    with sqlite3.connect(state / "larch.db") as db:     # what larchd 1 wrote
        db.executescript(migration_sql(1))
        db.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, "
                   "applied INTEGER NOT NULL) STRICT")
        db.execute("INSERT INTO schema_version VALUES (1, 0)")
        db.execute("INSERT INTO users VALUES ('old', 'user', 0)")
        db.execute("INSERT INTO jobs (owner, name, spec, state, submit_time) "
                   "VALUES ('old', 'old-job', '{}', 'COMPLETED', 0)")
    db.close()

    # check and backup leave the old schema as it is
    assert cli(state, "db", "check").returncode == 0
    backup = cli(state, "db", "backup", str(tmp_path / "old.db"))
    assert backup.returncode == 0, backup.stderr
    for path in (state / "larch.db", tmp_path / "old.db"):
        with sqlite3.connect(path) as db:
            assert db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == 1
        db.close()

    latest = migration_count()
    migrated = cli(state, "db", "migrate")
    assert migrated.returncode == 0, migrated.stderr
    assert f"schema version 1 -> {latest} ({latest - 1} migrations applied)" in migrated.stdout
    again = cli(state, "db", "migrate")
    assert again.returncode == 0 and f"{latest} -> {latest} (0 migrations applied)" in again.stdout
    assert cli(state, "db", "check").returncode == 0
    with sqlite3.connect(state / "larch.db") as db:
        assert db.execute("SELECT max(version) FROM schema_version").fetchone()[0] == latest
        assert db.execute("SELECT progress_step FROM jobs").fetchone()[0] == 0
        assert db.execute("SELECT count(*) FROM metrics").fetchone()[0] == 0
    db.close()


def test_help_and_bad_usage(tmp_path):
    exe = str(larchd_exe())
    state = tmp_path / "state"

    def run(*args):
        return subprocess.run([exe, *args], capture_output=True, text=True, timeout=30)

    r = run("--help")
    assert r.returncode == 0 and r.stdout.startswith("usage: larchd")
    assert "token create" in r.stdout and "--max-local-jobs" in r.stdout
    for group in ("token", "db"):
        r = run(group, "--help")
        assert r.returncode == 0 and r.stdout.startswith("usage:"), r
        assert f"larchd {group} " in r.stdout
    r = run("token", "create", "--help")
    assert r.returncode == 0 and "--role user|admin" in r.stdout
    bad = [
        ["--no-such-flag"],
        ["extra"],
        ["--max-local-jobs", "0"],
        ["token"],
        ["db"],
        ["token", "frob"],
        ["db", "frob"],
        ["token", "create", "--user", "x"],
        ["token", "create", "--user", "x", "--role", "root"],
        ["token", "create", "--user", "", "--role", "user"],
        ["token", "list", "--user", "x"],
        ["token", "list", "extra"],
        ["token", "revoke"],
        ["token", "revoke", "abc"],
        ["token", "revoke", "-1"],
        ["db", "backup"],
        ["db", "check", "--no-such-setting", "1"],
        ["token", "create", "--user"],
    ]
    for args in bad:
        r = run(*args, "--state-dir", str(state))
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        assert r.stderr.startswith("larchd: ") or r.stderr.startswith("usage:"), (args, r.stderr)
