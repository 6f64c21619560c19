"""Where the client finds larchd, its token and the CA to trust, as the
``larch`` CLI does (service/cli/config.c).

Server: the ``url`` argument > LARCH_URL > ``url = ...`` in the config file >
http://127.0.0.1:8080. Token: ``token`` > LARCH_TOKEN > ``token = ...``.
CA file (HTTPS): ``ca`` > LARCH_CA > ``ca = ...``. The config file is
$XDG_CONFIG_HOME/larch/config (an absolute XDG_CONFIG_HOME), else
~/.config/larch/config: lines of ``key = value`` and ``#`` comments. It holds
a token, so like the CLI the client refuses one that is not the user's own
or that others may read or write. It is read only when a setting is still
missing (the url or the token; the ca for an https url).
"""
import os
import stat
from pathlib import Path
from typing import Dict, Optional

from ._errors import LarchError

DEFAULT_URL = "http://127.0.0.1:8080"
MAX_FILE = 64 << 10
KEYS = ("url", "token", "ca")


class ConfigError(LarchError):
    """The config file cannot be used (its permissions, its lines)."""

    def __init__(self, message: str) -> None:
        super().__init__(None, "config", message)


def config_path() -> Optional[Path]:
    xdg = os.environ.get("XDG_CONFIG_HOME")
    if xdg and xdg.startswith("/"):
        return Path(xdg) / "larch" / "config"
    home = os.environ.get("HOME")
    return Path(home) / ".config" / "larch" / "config" if home else None


def read_config(path: Path) -> Dict[str, str]:
    """The settings of the config file at path ({} when there is none)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return {}
    except OSError as e:
        raise ConfigError(f"{path}: {e.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{path}: not a regular file")
        if st.st_uid != os.geteuid():
            raise ConfigError(f"{path} belongs to uid {st.st_uid}, not to you (uid "
                              f"{os.geteuid()}): it holds a token, so only your own is read")
        if st.st_mode & 0o077:
            raise ConfigError(f"permissions {stat.S_IMODE(st.st_mode):04o} for {path} are too "
                              f"open: it holds a token (chmod 600 {path})")
        raw = f.read(MAX_FILE + 1)
    if len(raw) > MAX_FILE:
        raise ConfigError(f"{path}: larger than {MAX_FILE >> 10} KiB")
    out: Dict[str, str] = {}
    for n, line in enumerate(raw.decode("utf-8", "replace").splitlines(), 1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        key, eq, value = s.partition("=")
        if not eq:
            raise ConfigError(f'{path}:{n}: expected "key = value"')
        key = key.strip()
        if key in KEYS:
            out.setdefault(key, value.strip())
    return out


def resolve(url: Optional[str], token: Optional[str],
            ca: Optional[str]) -> Dict[str, Optional[str]]:
    """The url, token and ca to use (token and ca may be None)."""
    got: Dict[str, Optional[str]] = {
        "url": url or os.environ.get("LARCH_URL") or None,
        "token": token or os.environ.get("LARCH_TOKEN") or None,
        "ca": ca or os.environ.get("LARCH_CA") or None,
    }
    path = config_path()
    https = (got["url"] or "").lower().startswith("https:")
    if path and (got["url"] is None or got["token"] is None or (https and got["ca"] is None)):
        for key, value in read_config(path).items():
            if got[key] is None:
                got[key] = value
    if got["token"] is not None:
        t = got["token"]
        if not t or any(c <= " " or c >= "\x7f" for c in t):
            raise ConfigError("the token is not one word of printable characters")
    got["url"] = (got["url"] or DEFAULT_URL).rstrip("/")
    return got
