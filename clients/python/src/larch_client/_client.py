"""Client: larchd's REST API (docs/api.md) as Python methods.

Every method is one or a few HTTP requests over one requests.Session; an
answer that is not 2xx raises the LarchError subclass of its status with the
API's error code, message and detail. Lists are generators that follow
``next_cursor`` page by page. Connection failures are requests' own
exceptions (requests.ConnectionError, requests.Timeout).
"""
import hashlib
import os
import time
from pathlib import Path
from typing import (Any, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple,
                    Union)

import requests

from . import _config
from ._errors import ChecksumMismatch, LarchError, error_from

Json = Dict[str, Any]
PathLike = Union[str, "os.PathLike[str]"]

FINAL_STATES = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"})
DOWNLOAD_ATTEMPTS = 4          # one try and three resumes, as `larch checkpoint download`
CHUNK = 1 << 20


def _csv(value: Union[None, str, Iterable[str]]) -> Optional[str]:
    if value is None or isinstance(value, str):
        return value
    return ",".join(value)


def _label(label: Union[None, str, Tuple[str, str], Mapping[str, str]]) -> Optional[str]:
    """A label filter: "key:value", (key, value) or {key: value} (one)."""
    if label is None or isinstance(label, str):
        return label
    if isinstance(label, Mapping):
        if len(label) != 1:
            raise ValueError("label: one key and value to filter by")
        label = next(iter(label.items()))
    return f"{label[0]}:{label[1]}"


class Client:
    """A connection to larchd.

    ``url``, ``token`` and ``ca`` default to LARCH_URL, LARCH_TOKEN and
    LARCH_CA, then to the ``larch`` CLI's config file
    (~/.config/larch/config), then the url to http://127.0.0.1:8080.
    ``ca`` is a CA certificate file (PEM) that larchd's HTTPS certificate
    must chain to; without one the system's CAs are used. ``timeout`` is
    the seconds one request may take (a long poll adds its own).
    """

    def __init__(self, url: Optional[str] = None, token: Optional[str] = None,
                 ca: Optional[str] = None, timeout: float = 30.0) -> None:
        got = _config.resolve(url, token, ca)
        self.url: str = got["url"] or _config.DEFAULT_URL
        self.ca: Optional[str] = got["ca"]
        self.timeout = timeout
        self.session = requests.Session()
        self.session.verify = self.ca if self.ca else True
        self.session.headers["User-Agent"] = "larch-client-python"
        if got["token"]:
            self.session.headers["Authorization"] = f"Bearer {got['token']}"

    def close(self) -> None:
        self.session.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- plumbing ---------------------------------------------------------------

    def _request(self, method: str, path: str, *, params: Any = None, body: Any = None,
                 headers: Optional[Mapping[str, str]] = None, timeout: Optional[float] = None,
                 ok: Sequence[int] = (200,), stream: bool = False) -> requests.Response:
        r = self.session.request(method, self.url + path, params=params, json=body,
                                 headers=dict(headers or {}), stream=stream,
                                 timeout=timeout or self.timeout)
        if r.status_code not in ok:
            raise self._error(r)
        return r

    @staticmethod
    def _error(r: requests.Response) -> LarchError:
        text = r.text
        try:
            body = r.json()
        except ValueError:
            body = None
        return error_from(r.status_code, body, text)

    def _json(self, method: str, path: str, **kw: Any) -> Json:
        r = self._request(method, path, **kw)
        return r.json() if r.content else {}

    def _pages(self, path: str, key: str, params: Dict[str, Any]) -> Iterator[Json]:
        query = {k: v for k, v in params.items() if v is not None}
        while True:
            page = self._json("GET", path, params=query)
            yield from page.get(key, [])
            cursor = page.get("next_cursor")
            if not cursor:
                return
            query["cursor"] = cursor

    @staticmethod
    def _id(value: str) -> str:
        """A job, sweep or webhook id as one path segment."""
        if not value or "/" in value or value in (".", ".."):
            raise ValueError(f"not an id: {value!r}")
        return requests.utils.quote(value, safe="")

    # ---- service ----------------------------------------------------------------

    def health(self) -> Json:
        """GET /healthz."""
        return self._json("GET", "/healthz")

    def whoami(self) -> Json:
        """GET /v1/whoami: {"user", "role"} of the token."""
        return self._json("GET", "/v1/whoami")

    # ---- jobs -------------------------------------------------------------------

    def submit(self, spec: Mapping[str, Any], labels: Optional[Mapping[str, str]] = None,
               idempotency_key: Optional[str] = None) -> Json:
        """POST /v1/jobs: the job (a retry with the same idempotency_key and
        spec gives the same job)."""
        body = dict(spec)
        if labels is not None:
            body["labels"] = dict(labels)
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else None
        return self._json("POST", "/v1/jobs", body=body, headers=headers, ok=(200, 201))

    def get(self, job_id: str) -> Json:
        """GET /v1/jobs/{id}: the job."""
        return self._json("GET", f"/v1/jobs/{self._id(job_id)}")

    def list(self, state: Optional[str] = None, sweep: Optional[str] = None,
             label: Union[None, str, Tuple[str, str], Mapping[str, str]] = None,
             name: Optional[str] = None, owner: Optional[str] = None,
             page_size: Optional[int] = None) -> Iterator[Json]:
        """GET /v1/jobs, every page: the jobs, newest first. label is
        "key:value" (or a pair, or a one-item dict); owner is for admins."""
        return self._pages("/v1/jobs", "jobs", {
            "state": state, "sweep": sweep, "label": _label(label), "name": name,
            "owner": owner, "limit": page_size})

    def cancel(self, job_id: str) -> Json:
        """POST /v1/jobs/{id}/cancel: the job (Conflict when it has ended)."""
        return self._json("POST", f"/v1/jobs/{self._id(job_id)}/cancel")

    def set_labels(self, job_id: str, labels: Mapping[str, str]) -> Json:
        """PATCH /v1/jobs/{id} with labels alone: the job."""
        return self._json("PATCH", f"/v1/jobs/{self._id(job_id)}",
                          body={"labels": dict(labels)})

    def events(self, job_id: str) -> List[Json]:
        """GET /v1/jobs/{id}/events: the job's changes of state."""
        return list(self._json("GET", f"/v1/jobs/{self._id(job_id)}/events")["events"])

    def _log_piece(self, job_id: str, stream: str, offset: int) -> Json:
        return self._json("GET", f"/v1/jobs/{self._id(job_id)}/logs",
                          params={"stream": stream, "offset": offset, "limit": CHUNK})

    def logs(self, job_id: str, stream: str = "stdout", follow: bool = False,
             poll: float = 1.0) -> Union[str, Iterator[str]]:
        """The job's output (stream "stdout" or "stderr").

        Without follow: all of it so far, as one string. With follow: a
        generator of its lines (without their newline) as they are written,
        polled every ``poll`` seconds, that ends once the job has ended and
        its last output was read (a last line without a newline included).
        """
        if follow:
            return self._follow_logs(job_id, stream, poll)
        parts: List[str] = []
        offset = 0
        while True:
            piece = self._log_piece(job_id, stream, offset)
            parts.append(piece["data"])
            offset = piece["next_offset"]
            if offset >= piece["size"] or not piece["data"]:
                return "".join(parts)

    def _follow_logs(self, job_id: str, stream: str, poll: float) -> Iterator[str]:
        offset, partial = 0, ""
        ended = False
        while True:
            # the state is read before the output, so that the output read
            # after a job was seen ended is all of it
            if not ended:
                ended = self.get(job_id)["state"] in FINAL_STATES
            while True:
                piece = self._log_piece(job_id, stream, offset)
                offset = piece["next_offset"]
                lines = (partial + piece["data"]).split("\n")
                partial = lines.pop()
                yield from lines
                if offset >= piece["size"] or not piece["data"]:
                    break
            if ended:
                if partial:
                    yield partial
                return
            time.sleep(poll)

    def metrics(self, job_id: str, name: Union[None, str, Sequence[str]] = None,
                max_points: Optional[int] = None, from_step: Optional[int] = None,
                to_step: Optional[int] = None) -> Json:
        """GET /v1/jobs/{id}/metrics: {"series": {name: [[step, value], ...]},
        "reported", "state"}; name is one metric or several (all without)."""
        names = [name] if isinstance(name, str) else list(name or [])
        params: List[Tuple[str, Any]] = [("name", n) for n in names]
        params += [(k, v) for k, v in (("max_points", max_points), ("from_step", from_step),
                                       ("to_step", to_step)) if v is not None]
        return self._json("GET", f"/v1/jobs/{self._id(job_id)}/metrics", params=params)

    def compare(self, jobs: Sequence[str], name: str, x: Optional[str] = None,
                max_points: Optional[int] = None, from_step: Optional[int] = None,
                to_step: Optional[int] = None) -> Json:
        """GET /v1/metrics: one metric of several jobs, {"name", "x", "jobs":
        [{"id", "name", "state", "points"} | {"id", "error"}]}."""
        params = {"jobs": _csv(jobs), "name": name, "x": x, "max_points": max_points,
                  "from_step": from_step, "to_step": to_step}
        return self._json("GET", "/v1/metrics",
                          params={k: v for k, v in params.items() if v is not None})

    # ---- live updates -----------------------------------------------------------

    def changes(self, after: Optional[int] = None, stream: Optional[str] = None,
                timeout: Optional[int] = None) -> Json:
        """One GET /v1/events: {"stream", "last", "reset", "changes"}."""
        params = {"after": after, "stream": stream, "timeout": timeout}
        return self._json("GET", "/v1/events",
                          params={k: v for k, v in params.items() if v is not None},
                          timeout=self.timeout + (timeout or 0))

    def watch(self, job_id: str, timeout: Optional[float] = None,
              poll_timeout: int = 25) -> Iterator[Json]:
        """A generator of the job's changes of state, over the /v1/events long
        poll: dicts {"job", "state", "time", "seq"}, the first its state now
        (seq and time None), then one per new state, ending after a final one
        (COMPLETED, FAILED, CANCELLED, TIMEOUT). With timeout, a TimeoutError
        when the job has not ended that many seconds after the call."""
        deadline = None if timeout is None else time.monotonic() + timeout
        head = self.changes()
        cursor, stream = head["last"], head["stream"]
        job = self.get(job_id)
        job_id, state = job["id"], job["state"]
        yield {"job": job_id, "state": state, "time": None, "seq": None}
        while state not in FINAL_STATES:
            wait = poll_timeout
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"job {job_id} is still {state} after {timeout}s")
                wait = max(1, min(poll_timeout, int(left + 0.999)))
            got = self.changes(after=cursor, stream=stream, timeout=wait)
            cursor, stream = got["last"], got["stream"]
            if got["reset"]:
                # larchd restarted, or this fell behind: read the job itself
                now = self.get(job_id)["state"]
                if now != state:
                    state = now
                    yield {"job": job_id, "state": state, "time": None, "seq": None}
                continue
            for change in got["changes"]:
                if change.get("job") == job_id and change.get("state") != state:
                    state = change["state"]
                    yield change
                    if state in FINAL_STATES:
                        break

    def wait(self, job_id: str, timeout: Optional[float] = None) -> Json:
        """Follows the job (watch) until it has ended; the job then. A
        TimeoutError when it has not ended after timeout seconds."""
        for _ in self.watch(job_id, timeout=timeout):
            pass
        return self.get(job_id)

    # ---- checkpoints ------------------------------------------------------------

    def checkpoints(self, job_id: str) -> List[Json]:
        """GET /v1/jobs/{id}/checkpoints: [{"step", "init", "bytes", "sha256",
        "time"}, ...]."""
        return list(self._json("GET", f"/v1/jobs/{self._id(job_id)}/checkpoints")
                    ["checkpoints"])

    def download_checkpoint(self, job_id: str, step: Optional[int] = None,
                            path: Optional[PathLike] = None) -> Path:
        """Saves the job's newest checkpoint (or that of step) to path
        (default ``<id>-step-<8 digits>.safetensors``) and returns path.

        As ``larch checkpoint download``: the bytes go to ``path.part``; a
        ``.part`` already there is resumed from its end with a Range request,
        and so is a transfer that breaks (a few times); path appears only
        when the whole file has the recorded sha256. A mismatch raises
        ChecksumMismatch and keeps the ``.part`` (delete it to start over).
        """
        listed = self.checkpoints(job_id)
        if not listed:
            raise LarchError(None, "not_found", f"job {job_id} has no checkpoint yet")
        if step is None:
            ck = max(listed, key=lambda c: c["step"])
        else:
            found = [c for c in listed if c["step"] == step]
            if not found:
                raise LarchError(None, "not_found", f"job {job_id} has no checkpoint of step {step}")
            ck = found[0]
        want, size, step = ck["sha256"], int(ck["bytes"]), int(ck["step"])
        out = Path(path) if path is not None else Path(f"{job_id}-step-{step:08d}.safetensors")
        part = out.with_name(out.name + ".part")
        url = f"/v1/jobs/{self._id(job_id)}/checkpoints/{step}"
        with open(part, "ab+") as f:
            have = f.seek(0, os.SEEK_END)
            if have > size:               # not a piece of this file: start over
                f.truncate(0)
                have = 0
            attempt = 0
            while have < size:
                attempt += 1
                try:
                    have = self._fetch_range(url, f, have, want, job_id, step)
                    break
                except (requests.ConnectionError, requests.Timeout,
                        requests.exceptions.ChunkedEncodingError):
                    if attempt == DOWNLOAD_ATTEMPTS:
                        raise
                    have = f.seek(0, os.SEEK_END)
                    time.sleep(0.5 * attempt)
            f.flush()
            f.seek(0)
            h = hashlib.sha256()
            for block in iter(lambda: f.read(CHUNK), b""):
                h.update(block)
            got = h.hexdigest()
            if got != want:
                raise ChecksumMismatch(None, "checksum_mismatch",
                                       f"{part}: sha256 {got} is not the recorded {want}; it is "
                                       f"kept (delete it to download again)")
            os.fsync(f.fileno())
        os.replace(part, out)
        return out

    def _fetch_range(self, url: str, f: Any, have: int, want: str, job_id: str,
                     step: int) -> int:
        """One GET of the checkpoint from byte have on, appended to f; the
        bytes f then holds. Raises on a refusal or a changed file."""
        headers = {"Accept": "application/octet-stream, application/json"}
        if have:
            headers["Range"] = f"bytes={have}-"
        r = self._request("GET", url, headers=headers, ok=(200, 206), stream=True)
        with r:
            if r.headers.get("ETag", f'"{want}"') != f'"{want}"':
                raise LarchError(None, "changed",
                                 f"checkpoint {step} of {job_id} changed on larchd while it was "
                                 f"listed (ETag {r.headers['ETag']}, listed sha256 {want}); "
                                 f"run again")
            if r.status_code == 200 and have:
                f.truncate(0)             # the whole file came instead of the range
                have = 0
            expected = int(r.headers.get("Content-Length", -1))
            got = 0
            for block in r.iter_content(CHUNK):
                f.write(block)
                got += len(block)
        # a body cut short (larchd cuts one whose file was rewritten during
        # the transfer): a broken transfer, resumed by the caller
        if 0 <= expected and got < expected:
            raise requests.ConnectionError(f"the transfer stopped after {got} of {expected} "
                                           f"bytes")
        return have + got

    # ---- sweeps -----------------------------------------------------------------

    def submit_sweep(self, sweep: Mapping[str, Any]) -> Json:
        """POST /v1/sweeps (body as docs/api.md "Sweeps"): the sweep."""
        return self._json("POST", "/v1/sweeps", body=dict(sweep), ok=(200, 201))

    def get_sweep(self, sweep_id: str) -> Json:
        """GET /v1/sweeps/{id}: the sweep with its children."""
        return self._json("GET", f"/v1/sweeps/{self._id(sweep_id)}")

    def list_sweeps(self, page_size: Optional[int] = None) -> Iterator[Json]:
        """GET /v1/sweeps, every page: the sweeps, newest first."""
        return self._pages("/v1/sweeps", "sweeps", {"limit": page_size})

    def cancel_sweep(self, sweep_id: str) -> Json:
        """POST /v1/sweeps/{id}/cancel: the sweep."""
        return self._json("POST", f"/v1/sweeps/{self._id(sweep_id)}/cancel")

    # ---- accounting -------------------------------------------------------------

    def usage(self, from_: Optional[str] = None, to: Optional[str] = None,
              group_by: Union[None, str, Sequence[str]] = None) -> Json:
        """GET /v1/usage: CPU and GPU hours and jobs per group; from_ and to
        are RFC 3339 times or dates, group_by some of user, account,
        partition, executor, day."""
        params = {"from": from_, "to": to, "group_by": _csv(group_by)}
        return self._json("GET", "/v1/usage",
                          params={k: v for k, v in params.items() if v is not None})

    # ---- webhooks ---------------------------------------------------------------

    def create_webhook(self, url: str, events: Sequence[str], secret: str) -> Json:
        """POST /v1/webhooks: the webhook (its secret is never shown again)."""
        return self._json("POST", "/v1/webhooks", ok=(200, 201),
                          body={"url": url, "events": list(events), "secret": secret})

    def list_webhooks(self) -> List[Json]:
        """GET /v1/webhooks: the user's webhooks (an admin's: everyone's)."""
        return list(self._json("GET", "/v1/webhooks")["webhooks"])

    def get_webhook(self, webhook_id: str) -> Json:
        """GET /v1/webhooks/{id}."""
        return self._json("GET", f"/v1/webhooks/{self._id(webhook_id)}")

    def delete_webhook(self, webhook_id: str) -> None:
        """DELETE /v1/webhooks/{id}, with its deliveries."""
        self._request("DELETE", f"/v1/webhooks/{self._id(webhook_id)}", ok=(200, 204))

    def webhook_deliveries(self, webhook_id: str, limit: Optional[int] = None) -> List[Json]:
        """GET /v1/webhooks/{id}/deliveries: newest first."""
        params = {"limit": limit} if limit is not None else None
        return list(self._json("GET", f"/v1/webhooks/{self._id(webhook_id)}/deliveries",
                               params=params)["deliveries"])
