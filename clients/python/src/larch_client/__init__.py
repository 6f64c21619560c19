"""larch_client: a Python client for larchd's REST API.

    from larch_client import Client
    c = Client()                      # LARCH_URL, LARCH_TOKEN, LARCH_CA
    job = c.submit(spec)
    for change in c.watch(job["id"]):
        print(change["state"])
"""
from ._client import FINAL_STATES, Client
from ._config import ConfigError
from ._errors import (BadRequest, ChecksumMismatch, Conflict, Forbidden, Infeasible, LarchError,
                      NotFound, Overloaded, Unauthorized)

__all__ = ["Client", "FINAL_STATES", "LarchError", "BadRequest", "Unauthorized", "Forbidden",
           "NotFound", "Conflict", "Infeasible", "Overloaded", "ChecksumMismatch", "ConfigError"]
__version__ = "0.1.0"
