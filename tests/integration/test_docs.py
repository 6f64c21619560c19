"""The job specs shown to users are valid: every JSON example in the README and
docs/spec.md, and every file in trainer/examples, passes larch-train --check."""
import json
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
