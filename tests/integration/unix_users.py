"""Real Unix users for the tests of jobs that run as their owner.

Run as root (as CI does), larchd runs every job as its owner's Unix user
(run_as owner), so the larch users the tests make tokens for must be Unix
users of this machine. `ensure()` creates the ones missing with useradd
(system accounts: no home, no login shell), once per test session; they are
left in place (a later run finds them). `make_reachable()` opens the
directories above a path for search by other users (o+x, never read), so
that a job running as such a user reaches its job directory under a pytest
tmp dir (pytest makes its base 0700) and the trainer in the build tree.

    from unix_users import ensure, TEST_USERS
"""
import os
import pathlib
import pwd
import shutil
import stat
import subprocess

import pytest

# the larch users the tests make tokens for; each runs jobs as the Unix user
# of its name
TEST_USERS = ("alice", "bob", "carol")

_made = set()


def exists(name):
    try:
        pwd.getpwnam(name)
        return True
    except KeyError:
        return False


def ensure(names=TEST_USERS):
    """Creates the Unix users of names that do not exist (root only)."""
    for name in names:
        if name in _made or exists(name):
            _made.add(name)
            continue
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        out = subprocess.run([useradd, "--system", "--no-create-home", "--home-dir", "/nonexistent",
                              "--shell", "/usr/sbin/nologin", "--comment", "larch test user",
                              name], capture_output=True, text=True, timeout=30)
        if out.returncode != 0 and not exists(name):
            pytest.fail(f"useradd {name} failed: {out.stderr.strip()}")
        _made.add(name)


def uid(name):
    return pwd.getpwnam(name).pw_uid


def make_reachable(path):
    """Adds o+x (search) to every directory above path that lacks it."""
    p = pathlib.Path(path).resolve()
    for d in [p, *p.parents]:
        if not d.is_dir():
            continue
        mode = d.stat().st_mode
        if not mode & stat.S_IXOTH:
            os.chmod(d, stat.S_IMODE(mode) | stat.S_IXOTH)
