"""The job specs shown to users are valid: every JSON example in the README and
docs/spec.md, and every file in trainer/examples, passes larch-train --check;
the README's quick start and its Slurm sections run as written."""
import json
import os
import re
import select
import signal
import socket
import subprocess
import time

import pytest
import requests


def doc_examples(root):
    for doc in ("README.md", "docs/spec.md"):
        text = (root / doc).read_text()
        for i, block in enumerate(re.findall(r"```json\n(.*?)```", text, re.S)):
            yield f"{doc}#{i}", block
    for path in sorted((root / "trainer" / "examples").glob("*.json")):
        yield str(path.relative_to(root)), path.read_text()


def test_every_example_spec_is_valid(larch_train, root_dir, tmp_path):
    examples = list(doc_examples(root_dir))
    assert len(examples) >= 6
    for name, text in examples:
        json.loads(text)
        path = tmp_path / "spec.json"
        path.write_text(text)
        out = subprocess.run([larch_train, "--check", path], capture_output=True, text=True)
        assert out.returncode == 0, f"{name}: {out.stderr}"


def sh_blocks(text, must_contain):
    return [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if must_contain in b]


def test_readme_quick_start_against_larchd(root_dir, tmp_path):
    """The README's curl and CLI lines, run as written against a larchd that
    uses the embedded state dir (./larch-state) in a scratch directory that
    looks like the top of a clone (build/ and trainer/ linked in)."""
    from larchd import BUILD, Larchd

    readme = (root_dir / "README.md").read_text()
    start = sh_blocks(readme, "./build/service/larchd")
    assert start and start[0].rstrip().endswith("./build/service/larchd"), start
    curl, = sh_blocks(readme, "curl -s")
    cli, = sh_blocks(readme, "larch submit")

    (tmp_path / "build").symlink_to(BUILD)
    (tmp_path / "trainer").symlink_to(root_dir / "trainer")
    server = Larchd(tmp_path, state_dir=tmp_path / "larch-state").start()
    try:
        env = dict(os.environ, HOME=str(tmp_path))
        env.pop("LARCH_URL", None)
        env.pop("LARCH_TOKEN", None)

        def run(block):
            script = "set -euo pipefail\n" + block.replace("http://127.0.0.1:8080", server.url)
            out = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env,
                                 capture_output=True, text=True, timeout=300)
            assert out.returncode == 0, f"{block}\n{out.stdout}\n{out.stderr}"
            return out.stdout

        out = run(curl)
        replies, pos, decoder = [], 0, json.JSONDecoder()
        while out[pos:].strip():
            reply, end = decoder.raw_decode(out[pos:].lstrip())
            pos = len(out) - len(out[pos:].lstrip()) + end
            replies.append(reply)
        assert replies[0]["id"] == "j-000001" and replies[0]["name"] == "fmnist-quick"
        assert replies[1]["id"] == "j-000001"
        assert "series" in replies[2]

        out = run(cli)
        assert re.search(r"^j-000002\s+fmnist-quick\s+\S+\s+COMPLETED", out, re.M), out
        assert "val/accuracy" in out
    finally:
        server.stop()


def section(text, title):
    """The README's section under `## title`, up to the next one."""
    return re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", text, re.S | re.M).group(1)


def test_readme_slurm_sections_beside_the_quick_start(root_dir, tmp_path):
    """"A Slurm cluster for development" and "Run with Slurm" run as written in
    a scratch clone while the quick start's larchd runs on ./larch-state:
    start.sh picks free ports (6817 is held here) and says which, stop.sh
    stops the cluster on them, and the Slurm larchd starts on a state dir
    and port of its own (its fixed port made 0 here)."""
    from larchd import BUILD, Larchd
    from slurm import require_slurm

    require_slurm()
    readme = (root_dir / "README.md").read_text()
    dev, = sh_blocks(section(readme, "A Slurm cluster for development"), "start.sh")
    run_slurm, = sh_blocks(section(readme, "Run with Slurm"), "start.sh")
    assert "LARCH_SLURM_PORT" in section(readme, "A Slurm cluster for development")
    line = run_slurm.strip().splitlines()[-1]
    assert line.startswith("./build/service/larchd --executor slurm"), line
    listen = re.search(r"--listen (\S+)", line).group(1)
    state = re.search(r"--state-dir (\S+)", line).group(1)
    assert listen != "127.0.0.1:8080" and state not in ("larch-state", "./larch-state"), line

    (tmp_path / "build").symlink_to(BUILD)
    (tmp_path / "trainer").symlink_to(root_dir / "trainer")
    (tmp_path / "deploy").symlink_to(root_dir / "deploy")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SLURM_", "LARCH_SLURM_", "LARCHD_"))}
    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        held.bind(("127.0.0.1", 6817))
        held.listen()
    except OSError:
        pass                        # taken already: start.sh must pass it by all the same
    quick = Larchd(tmp_path, state_dir=tmp_path / "larch-state").start()
    proc = None
    try:
        out = subprocess.run(["bash", "-c", "set -euo pipefail\n" + dev], cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, f"{dev}\n{out.stdout}\n{out.stderr}"
        m = re.search(r"ports: slurmctld (\d+), slurmd (\d+), slurmdbd (\d+)\)", out.stdout)
        assert m, out.stdout
        port = int(m.group(1))
        assert port > 6817 and [int(p) for p in m.groups()] == [port, port + 1, port + 2]
        assert f"ports 6817-6819 are not all free: using {port}-{port + 2}" in out.stdout
        assert "slurm-dev: stopped slurmd slurmctld slurmdbd mariadbd munged" in out.stdout
        conf = (tmp_path / "slurm-dev" / "slurm.conf").read_text()
        assert f"SlurmctldPort={port}\n" in conf

        # larchd in the foreground, as written: exec'd, so that SIGTERM reaches it
        script = "set -euo pipefail\n" + run_slurm.replace(line, "exec " + line).replace(
            listen, "127.0.0.1:0")
        proc = subprocess.Popen(["bash", "-c", script], cwd=tmp_path, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True)
        text, deadline = b"", time.monotonic() + 120
        while not (m := re.search(rb"^larchd: listening on (http://\S+)$", text, re.M)):
            left = deadline - time.monotonic()
            assert left > 0 and proc.poll() is None, text.decode(errors="replace")
            if select.select([proc.stdout], [], [], left)[0]:
                text += os.read(proc.stdout.fileno(), 65536)
        url = m.group(1).decode()
        assert f"ports: slurmctld {port}, " in text.decode()   # the same ports again
        health = requests.get(url + "/healthz", timeout=30).json()
        assert health["status"] in ("ok", "degraded"), health
        assert (tmp_path / state / "admin.token").exists()
        assert requests.get(quick.url + "/healthz", timeout=30).status_code == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc is not None and proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        stop = subprocess.run([str(root_dir / "deploy" / "slurm" / "stop.sh")], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)
        held.close()
        quick.stop()
    assert stop.returncode == 0, stop.stdout + stop.stderr
