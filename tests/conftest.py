"""Shared fixtures for the Python tests (numeric and integration).

The tests drive the release build: LARCH_BUILD_DIR (set by tests/run.sh), or
build/ at the top of the repository.
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
BUILD = pathlib.Path(os.environ.get("LARCH_BUILD_DIR", ROOT / "build"))


def _built(path):
    if not path.exists():
        pytest.fail(f"{path} is missing: build first (cmake -S . -B build && cmake --build build)")
    return path


@pytest.fixture(scope="session")
def root_dir():
    return ROOT


@pytest.fixture(scope="session")
def larch_train():
    """Path of the larch-train executable."""
    return _built(BUILD / "trainer" / "larch-train")


@pytest.fixture(scope="session")
def libtrainer_path():
    """Path of the trainer's shared library (trainer/capi.h over ctypes)."""
    return _built(BUILD / "trainer" / "liblarch_trainer.so")
