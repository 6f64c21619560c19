"""The job specs shown to users are valid: every JSON example in the README and
docs/spec.md, and every file in trainer/examples, passes larch-train --check."""
import json
import os
import re
import subprocess

import pytest


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
