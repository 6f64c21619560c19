"""What each program says of itself: `larchd --version`, `larch --version` and
`larch-train --version` print the same version (the CMake project's, with the
git commit the build was configured from where there is one) and exit 0;
`larch help` is `larch --help`, `larch help CMD` is `larch CMD --help`."""
import os
import re
import subprocess

import pytest
import requests

from larchd import BUILD, ROOT, larchd  # noqa: F401  (the fixture)

LARCH = BUILD / "service" / "larch"


def project_version():
    text = (ROOT / "CMakeLists.txt").read_text()
    return re.search(r"^project\(larch VERSION (\d+\.\d+\.\d+)", text, re.M).group(1)


def run(*cmd):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LARCH_", "LARCHD_"))}
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env,
                          timeout=30)


def git(*args):
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)


def test_every_program_prints_one_version(larch_train):
    texts = set()
    for name, exe in (("larchd", BUILD / "service" / "larchd"), ("larch", LARCH),
                      ("larch-train", larch_train)):
        out = run(exe, "--version")
        assert out.returncode == 0 and out.stderr == "", out
        m = re.fullmatch(rf"{name} (\d+\.\d+\.\d+)( \(git ([0-9a-f]{{7,}})\))?\n", out.stdout)
        assert m, out.stdout
        assert m.group(1) == project_version()
        texts.add(out.stdout.split(" ", 1)[1])
        commit = m.group(3)
        if git("rev-parse", "--git-dir").returncode == 0:
            # configured from this checkout: a commit of it
            assert commit, f"{name}: no commit in {out.stdout!r} in a git checkout"
            assert git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0, commit
    assert len(texts) == 1, texts


def test_larchd_version_is_the_api_version(larchd):
    body = requests.get(larchd.url + "/healthz", timeout=10).json()
    out = run(larchd.exe, "--version").stdout
    assert out.startswith(f"larchd {body['version']}")
    assert body["version"] == project_version()


def test_help_is_dash_dash_help():
    top = run(LARCH, "help")
    assert top.returncode == 0 and top.stderr == ""
    assert top.stdout == run(LARCH, "--help").stdout
    assert "larch help [COMMAND]" in top.stdout
    commands = re.findall(r"^  ([a-z]+) +\S",
                          top.stdout.split("Commands:\n")[1].split("\n\n")[0], re.M)
    assert {"submit", "ls", "watch", "admin"} <= set(commands), commands
    for cmd in commands:
        out = run(LARCH, "help", cmd)
        assert out.returncode == 0 and out.stderr == "", (cmd, out)
        assert out.stdout == run(LARCH, cmd, "--help").stdout, cmd
        assert out.stdout.startswith(f"usage: larch {cmd} ")


@pytest.mark.parametrize("args, message", [
    (["nope"], 'larch help: unknown command "nope" (larch --help lists them)\n'),
    (["ls", "extra"], "larch help: takes at most one command (usage: larch help [COMMAND])\n"),
])
def test_help_bad_usage(args, message):
    out = run(LARCH, "help", *args)
    assert out.returncode == 2 and out.stdout == "" and out.stderr == message
