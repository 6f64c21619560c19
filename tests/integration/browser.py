"""A real browser for the dashboard tests: Debian's chromium driven by its
chromedriver through selenium, headless.

`chrome()` starts one (1280x900, console messages kept for get_log), or
skips the test when chromium, chromedriver or selenium is missing; with
CI=true that is a failure instead, since CI installs them. Screenshots go
to $LARCH_ARTIFACTS_DIR/dashboard/ (default: <build dir>/test-artifacts/dashboard/).
"""
import base64
import os
import pathlib
import shutil

import pytest

from larchd import BUILD

CI = os.environ.get("CI") == "true"


def _missing(what):
    message = (f"{what} is missing: run deploy/install-deps.sh (chromium, chromium-driver; "
               "selenium in .venv)")
    if CI:
        pytest.fail(message)
    pytest.skip(message)


def _find(names):
    for name in names:
        path = shutil.which(name)
        if path:
            return path
    return None


def chrome(width=1280, height=900):
    """A new headless chromium (the caller quits it)."""
    try:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service
    except ImportError:
        _missing("selenium")
    binary = _find(["chromium", "chromium-browser", "google-chrome"])
    driver_path = _find(["chromedriver"])
    if not binary:
        _missing("chromium")
    if not driver_path:
        _missing("chromedriver")
    opts = webdriver.ChromeOptions()
    opts.binary_location = binary
    for arg in ("--headless=new", f"--window-size={width},{height}", "--disable-gpu",
                "--disable-dev-shm-usage", "--disable-extensions", "--no-first-run",
                "--disable-background-networking", "--disable-component-update",
                "--force-device-scale-factor=1", "--hide-scrollbars"):
        opts.add_argument(arg)
    if os.geteuid() == 0:
        opts.add_argument("--no-sandbox")
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=opts)


def artifacts_dir():
    """Where the screenshots go (created)."""
    base = os.environ.get("LARCH_ARTIFACTS_DIR")
    path = pathlib.Path(base) if base else BUILD / "test-artifacts"
    path = path / "dashboard"
    path.mkdir(parents=True, exist_ok=True)
    return path


def screenshot(driver, name, full_page=True):
    """Saves a PNG of the page as it is now (all of it, not only what the
    window shows, unless full_page is False); returns its path."""
    path = artifacts_dir() / f"{name}.png"
    if full_page:
        size = driver.execute_script(
            "return [document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = driver.execute_cdp_cmd("Page.captureScreenshot", {
            "format": "png", "captureBeyondViewport": True,
            "clip": {"x": 0, "y": 0, "width": size[0], "height": min(size[1], 6000), "scale": 1}})
        path.write_bytes(base64.b64decode(shot["data"]))
    else:
        driver.save_screenshot(str(path))
    return path
