"""Details of the larch CLI's output (service/cli) and of what larchd tells it:
`larch plan`'s verdict line for every combination of limits, `larch watch`'s
rates, total and final line, `larch logs` of a failed job, `larch metrics` of
a job that has not reported yet, and the resolved path in a missing relative
data file's error. One larchd for the module; the jobs are tiny."""
import http.server
import json
import os
import re
import struct
import subprocess
import time

import pytest
import requests

from larchd import BUILD, Larchd, StubServer, send_json

EXIT_OK, EXIT_REFUSED, EXIT_USAGE = 0, 1, 2

BIG_MLP = {"name": "big-mlp", "model": {"type": "mlp", "hidden": [4096, 4096]},
           "data": {"name": "fashion-mnist"}, "batch": {"global": 256},
           "optimizer": {"type": "adamw", "lr": 0.001}, "steps": 3, "log_every": 1}
ON_GPU = dict(BIG_MLP, name="big-gpu", resources={"gpus_per_node": 1})


def larch_exe():
    exe = BUILD / "service" / "larch"
    if not exe.exists():
        pytest.fail(f"{exe} is missing: build with -DWITH_SERVICE=ON first")
    return exe


def larch(*args, env=None, input=None, cwd=None, timeout=60):
    return subprocess.run([str(larch_exe()), *map(str, args)], env=env, input=input, cwd=cwd,
                          capture_output=True, text=True, timeout=timeout)


# ---- larch plan: the line under the plan ---------------------------------------------

NEEDS_HOST = r"it needs \d+\.\d\d GiB of host memory per node \({} GiB given\)"
NEEDS_GPU = r"\d+\.\d\d GiB per GPU \({} GiB given\)"
NO_GPU = " (a CPU job: --gpu-mem does not apply)"


@pytest.mark.parametrize("spec, args, rc, last", [
    (BIG_MLP, [], EXIT_OK, None),
    (BIG_MLP, ["--host-mem", "16"], EXIT_OK, re.escape("fits in 16 GiB of host memory per node")),
    (BIG_MLP, ["--gpu-mem", "80"], EXIT_OK,
     re.escape("fits: a CPU job needs no GPU memory (--gpu-mem does not apply)")),
    (BIG_MLP, ["--host-mem", "16", "--gpu-mem", "80"], EXIT_OK,
     re.escape("fits in 16 GiB of host memory per node" + NO_GPU)),
    (BIG_MLP, ["--host-mem", "0.5"], EXIT_REFUSED,
     "does not fit: " + NEEDS_HOST.format(r"0\.5") + ", not even at micro-batch 1"),
    (BIG_MLP, ["--host-mem", "0.5", "--gpu-mem", "0.1"], EXIT_REFUSED,
     "does not fit: " + NEEDS_HOST.format(r"0\.5") + ", not even at micro-batch 1" +
     re.escape(NO_GPU)),
    (ON_GPU, [], EXIT_OK, None),
    (ON_GPU, ["--host-mem", "16"], EXIT_OK, re.escape("fits in 16 GiB of host memory per node")),
    (ON_GPU, ["--gpu-mem", "80"], EXIT_OK, re.escape("fits in 80 GiB per GPU")),
    (ON_GPU, ["--host-mem", "16", "--gpu-mem", "80"], EXIT_OK,
     re.escape("fits in 16 GiB of host memory per node and 80 GiB per GPU")),
    (ON_GPU, ["--host-mem", "16", "--gpu-mem", "0.1"], EXIT_REFUSED,
     "does not fit: it needs " + NEEDS_GPU.format(r"0\.1") + ", not even at micro-batch 1"),
    (ON_GPU, ["--host-mem", "0.5", "--gpu-mem", "0.1"], EXIT_REFUSED,
     "does not fit: " + NEEDS_HOST.format(r"0\.5") + " and " + NEEDS_GPU.format(r"0\.1") +
     ", not even at micro-batch 1"),
])
def test_plan_verdict_line(tmp_path, spec, args, rc, last):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    out = larch("plan", path, *args)
    assert out.returncode == rc, out.stderr
    lines = out.stdout.splitlines()
    assert out.stderr == "" and lines[0].startswith("memory plan per rank: ")
    # every line of the table: an item, its MiB (or "-": none), where; nothing run together
    for line in lines[2:-1] if last else lines[2:]:
        assert re.match(r"^  [a-z_]+ +(\d+\.\d\d MiB|-)(  +\S.*)?$", line), line
    if last is None:
        assert not re.search(r"fit", out.stdout)
    else:
        assert re.fullmatch(last, lines[-1]), lines[-1]


def test_plan_verdict_names_the_largest_micro_batch(tmp_path):
    """Between 'not at all' and 'fits': the limit it breaks and the micro-batch
    that would fit, which then fits."""
    spec = dict(BIG_MLP, batch={"global": 4096, "micro": 4096})
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    fits_at = json.loads(larch("plan", "--json", path).stdout)
    host = (fits_at["host_bytes_per_node"] - 64 * 1024 ** 2) / 1024 ** 3
    out = larch("plan", path, "--host-mem", f"{host:.3f}")
    assert out.returncode == EXIT_REFUSED, out.stderr
    m = re.fullmatch("does not fit: " + NEEDS_HOST.format(re.escape(f"{host:.3f}".rstrip("0")))
                     + r"; the largest micro-batch that fits is (\d+)", out.stdout.splitlines()[-1])
    assert m, out.stdout
    best = int(m.group(1))
    assert 0 < best < 4096
    path.write_text(json.dumps(dict(spec, batch={"global": best, "micro": best})))
    out = larch("plan", path, "--host-mem", f"{host:.3f}")
    assert out.returncode == EXIT_OK
    assert out.stdout.splitlines()[-1] == f"fits in {host:.3f}".rstrip("0") + \
        " GiB of host memory per node"


# ---- against a real larchd ---------------------------------------------------------------

TINY = {"name": "tiny", "model": {"type": "mlp", "hidden": [16]}, "data": {"name": "fashion-mnist"},
        "batch": {"global": 6000}, "optimizer": {"type": "sgd", "lr": 0.1}, "log_every": 1}
# fashion-mnist's 60000 training images in global batches of 6000: 10 steps an epoch
LONG_EPOCHS = dict(TINY, name="long-epochs", epochs=1000)       # 10000 steps
TWO_EPOCHS = dict(TINY, name="two-epochs", epochs=2)             # 20 steps


def failing_spec(d):
    """A spec larchd takes (its files' headers are fine) and larch-train then
    fails at once, saying why on its stderr: the image file stops after 10 of
    the 300 images its header promises."""
    images, labels = d / "train-images-idx3-ubyte", d / "train-labels-idx1-ubyte"
    images.write_bytes(struct.pack(">IIII", 0x803, 300, 28, 28) + bytes(10 * 28 * 28))
    labels.write_bytes(struct.pack(">II", 0x801, 300) + bytes(i % 10 for i in range(300)))
    for f in (images, labels):
        f.chmod(0o644)
    return dict(TINY, name="fails", batch={"global": 30}, steps=5, data={"format": "idx", "train": {
        "images": str(images), "labels": str(labels)}})


class Site:
    """One larchd running one job at a time, alice's token, and three jobs
    submitted at the start: a long one in epochs that runs (and is cancelled),
    then, queued behind it, one that fails at once and a short one in epochs."""

    def __init__(self, tmp):
        self.server = Larchd(tmp, args=["--max-local-jobs", "1", "--cancel-grace", "10"]).start()
        out = subprocess.run([str(self.server.exe), "token", "create", "--user", "alice",
                              "--role", "user", "--state-dir", str(self.server.state_dir)],
                             capture_output=True, text=True, timeout=30)
        assert out.returncode == 0, out.stderr
        self.token = out.stdout.strip()
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("LARCH_")}
        self.env.update(HOME=str(tmp), LARCH_URL=self.server.url, LARCH_TOKEN=self.token)
        self.failing = failing_spec(tmp)
        self.long = self.submit(LONG_EPOCHS)
        self.fails = self.submit(self.failing)
        self.two = self.submit(TWO_EPOCHS)

    def larch(self, *args, input=None, timeout=60):
        return larch(*args, env=self.env, input=input, timeout=timeout)

    def submit(self, spec):
        out = self.larch("submit", "-", input=json.dumps(spec))
        assert out.returncode == EXIT_OK, out.stderr
        return out.stdout.strip()

    def get(self, path):
        r = requests.get(self.server.url + path, headers=self.server.auth(self.token), timeout=10)
        assert r.status_code == 200, r.text
        return r.json()

    def job(self, job):
        return self.get(f"/v1/jobs/{job}")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    s = Site(tmp_path_factory.mktemp("details"))
    yield s
    if s.server.running():
        s.server.stop()


def test_total_steps_known_from_the_submit(site):
    """A job in epochs has its total from the start: larchd counts it from the
    data's shape at the submit, before the trainer has reported anything."""
    job = site.job(site.two)
    assert job["state"] in ("PENDING", "QUEUED"), job      # behind the long job
    assert job["progress"]["total_steps"] == 20, job["progress"]
    assert site.job(site.long)["progress"]["total_steps"] == 10000


def test_metrics_before_the_first_report(site):
    body = site.get(f"/v1/jobs/{site.two}/metrics")
    assert body["series"] == {} and body["reported"] is False, body
    assert body["state"] in ("PENDING", "QUEUED"), body
    out = site.larch("metrics", site.two)
    assert out.returncode == EXIT_OK and out.stdout == ""
    assert re.fullmatch(rf"larch: job {site.two} has not reported any metrics yet "
                        r"\((PENDING|QUEUED)\)\n", out.stderr), out.stderr
    out = site.larch("metrics", "--csv", site.two)
    assert out.returncode == EXIT_OK and out.stdout == "" and "not reported" in out.stderr


def test_watch_a_cancelled_job_shows_where_it_stopped(site):
    watch = subprocess.Popen([str(larch_exe()), "watch", "--interval", "0.2", site.long],
                             env=site.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    try:
        seen = []
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = watch.stdout.readline()
            assert line, f"watch ended early: {seen} {watch.stderr.read()}"
            seen.append(line)
            # once it has seen steps go by: both smoothed rates and an ETA
            if re.search(r"  RUNNING  step \d+/10000 \(\d+%\)  loss \d\.\d+  \d+(\.\d\d)? steps/s  "
                         r"\d+ samples/s  eta \S*\d[smhd]$", line):
                break
        else:
            pytest.fail(f"no progress line with rates and an ETA: {seen}")
        out = site.larch("cancel", site.long)
        assert out.returncode == EXIT_OK, out.stderr
        rest, err = watch.communicate(timeout=60)
    finally:
        if watch.poll() is None:
            watch.kill()
            watch.communicate()
    assert watch.returncode == EXIT_REFUSED, err
    last = rest.splitlines()[-1]
    m = re.fullmatch(rf"{site.long}  CANCELLED  stopped at step (\d+)/10000 \(\d+%\)  "
                     r"loss \d\.\d+  in \d+s(  exit code \d+)?: cancelled by alice", last)
    assert m, last
    step = int(m.group(1))
    assert 0 < step < 10000
    progress = site.job(site.long)["progress"]
    assert (progress["step"], progress["total_steps"]) == (step, 10000), progress


def test_logs_of_a_failed_job_show_its_stderr(site):
    out = site.larch("watch", "--interval", "0.2", site.fails, timeout=120)
    assert out.returncode == EXIT_REFUSED
    assert re.match(rf"^{site.fails}  FAILED  stopped before its first step  ",
                    out.stdout.splitlines()[-1]), out.stdout
    images = site.failing["data"]["train"]["images"]
    own = site.larch("logs", "--stream", "stderr", site.fails)
    assert own.returncode == EXIT_OK and images in own.stdout and own.stderr == ""
    stdout = site.larch("logs", "--stream", "stdout", site.fails)
    assert stdout.returncode == EXIT_OK and stdout.stderr == ""
    out = site.larch("logs", site.fails)
    assert out.returncode == EXIT_OK and out.stdout == stdout.stdout
    head, *lines = out.stderr.splitlines()
    tail = own.stdout.rstrip("\n").splitlines()
    if len(tail) > 10:
        assert head == (f"larch: job {site.fails} FAILED; the last 10 lines of its stderr (all "
                        f"of it: larch logs --stream stderr {site.fails}):")
        tail = tail[-10:]
    else:
        assert head == f"larch: job {site.fails} FAILED; its stderr:"
    assert lines == ["  " + line for line in tail]
    assert any(images in line for line in lines)
    # -f ends the same way; --json leaves it out
    out = site.larch("logs", "-f", "--interval", "0.2", site.fails)
    assert out.returncode == EXIT_OK and out.stderr.startswith(head)
    out = site.larch("logs", "--json", site.fails)
    assert out.returncode == EXIT_OK and out.stderr == ""
    # it never reported a metric
    out = site.larch("metrics", site.fails)
    assert out.returncode == EXIT_OK and out.stdout == ""
    assert out.stderr == f"larch: job {site.fails} reported no metrics (FAILED)\n"


def test_an_epoch_job_completes_at_its_total(site):
    out = site.larch("watch", "--interval", "0.2", site.two, timeout=120)
    assert out.returncode == EXIT_OK, out.stdout + out.stderr
    assert re.search(rf"^{site.two}  COMPLETED  step 20/20 \(100%\)  loss \d\.\d+  in \d+s$",
                     out.stdout.splitlines()[-1]), out.stdout
    body = site.get(f"/v1/jobs/{site.two}/metrics?name=train/loss")
    assert body["reported"] is True and body["state"] == "COMPLETED"
    assert [p[0] for p in body["series"]["train/loss"]] == list(range(1, 21))
    # a name it never reported: no series, but it did report
    body = site.get(f"/v1/jobs/{site.two}/metrics?name=no/such")
    assert body == {"series": {}, "reported": True, "state": "COMPLETED"}
    out = site.larch("metrics", "--from", "1000", site.two)
    assert out.returncode == EXIT_OK and out.stdout == ""
    assert out.stderr == f"larch: job {site.two} has no points from step 1000\n"


def test_missing_relative_data_path_names_where_it_looked(site, tmp_path):
    """larchd's probe takes a relative path from the job's directory
    (<state>/jobs/j-NNNNNN); the refusal names both paths."""
    spec = dict(TINY, name="relative", steps=1, data={"format": "text",
                                                      "path": "../../corpus/none.txt"})
    spec["model"] = {"type": "gpt", "layers": 1, "heads": 1, "dim": 8, "seq": 16}
    out = site.larch("submit", "-", input=json.dumps(spec))
    assert out.returncode == EXIT_REFUSED, out.stdout
    state = site.server.state_dir.resolve()
    assert out.stderr == ("larch: the spec was refused: data.path: ../../corpus/none.txt "
                          f"(resolved: {state}/corpus/none.txt): No such file or directory\n")
    # larch plan takes it from its own working directory, and says so
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    (tmp_path / "a" / "b").mkdir(parents=True)
    out = larch("plan", "../../spec.json", cwd=tmp_path / "a" / "b")
    assert out.returncode == EXIT_USAGE
    assert out.stderr == ("larch: ../../spec.json: data.path: ../../corpus/none.txt (resolved: "
                          f"{tmp_path.resolve()}/corpus/none.txt): No such file or directory\n")


def test_a_missing_path_with_percent_signs_is_named_as_written(site):
    """The probe's message goes out as text, never as a printf format: a path
    of %n and %s is named as written and larchd keeps serving."""
    spec = dict(TINY, name="percent", steps=1, data={"format": "text",
                                                     "path": "../%n%s%n%x/none.txt"})
    spec["model"] = {"type": "gpt", "layers": 1, "heads": 1, "dim": 8, "seq": 16}
    out = site.larch("submit", "-", input=json.dumps(spec))
    assert out.returncode == EXIT_REFUSED, out.stdout
    assert "data.path: ../%n%s%n%x/none.txt (resolved: " in out.stderr, out.stderr
    assert "role" in site.get("/v1/whoami")


# ---- watch's rates against a stand-in larchd -------------------------------------------


class Progressing(StubServer):
    """A stand-in larchd whose job j-000001 moves one step at each poll, 40
    steps in all, while the trainer's reported speed swings between 1000 and
    3000 samples/s from one step to the next."""

    def __init__(self):
        outer = self
        self.step = 0

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                path = self.path.split("?")[0]
                if path == "/v1/jobs/j-000001":
                    outer.step = min(outer.step + 1, 40)
                    body = {"id": "j-000001", "name": "swing", "owner": "alice",
                            "state": "RUNNING" if outer.step < 40 else "COMPLETED",
                            "started_at": "2026-01-01T00:00:00.000Z",
                            "ended_at": None if outer.step < 40 else "2026-01-01T00:01:00.000Z",
                            "exit_code": None, "reason": None,
                            "spec": {"steps": 40, "batch": {"global": 100},
                                     "model": {"type": "mlp"}, "log_every": 1},
                            "progress": {"step": outer.step, "total_steps": 40,
                                         "train/loss": 1.0}}
                elif path == "/v1/jobs/j-000001/metrics":
                    speed = 1000.0 if outer.step % 2 else 3000.0
                    body = {"series": {"train/samples_per_s": [[outer.step, speed]]},
                            "reported": True, "state": "RUNNING"}
                else:
                    body = {"error": {"code": "not_found", "message": "no"}}
                data = json.dumps(body).encode()
                send_json(self, 200 if "error" not in body else 404, data)

        self.serve(Handler)


def test_watch_smooths_the_rates(tmp_path):
    """Each poll sees a new step and a speed far from the last one: the line
    shows a moving average, which a swing from 1000 to 3000 barely moves
    (the time constant is 30 s, the polls 50 ms apart), never the raw value."""
    fake = Progressing()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LARCH_")}
    env.update(HOME=str(tmp_path), LARCH_URL=fake.url, LARCH_TOKEN="t")
    try:
        out = larch("watch", "--interval", "0.05", "j-000001", env=env)
    finally:
        fake.close()
    assert out.returncode == EXIT_OK, out.stderr
    speeds = [float(m) for m in re.findall(r"  (\d+) samples/s", out.stdout)]
    rates = [float(m) for m in re.findall(r"  (\d+(?:\.\d\d)?) steps/s", out.stdout)]
    assert len(speeds) >= 30 and speeds[0] == 1000, out.stdout
    assert max(speeds) < 2000, out.stdout                 # raw, every other line: 3000
    # steps/s: before the watch has seen two steps, the trainer's speed over
    # the batch (1000 / 100); then its own count of steps going by
    assert rates and rates[0] == 10.0, out.stdout
    assert "  eta " in out.stdout.splitlines()[1]
    assert re.search(r"  COMPLETED  step 40/40 \(100%\)", out.stdout.splitlines()[-1])
