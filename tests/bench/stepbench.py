"""What the bench_step drivers share (bench_recompute.py, bench_offload_params.py):
running bench_step and reading its json line, with the share of the machine's
CPU that other processes took meanwhile (the machines are shared: a round that
competed for the CPU reads slower)."""
import json
import os
import resource
import subprocess
import sys


def cpu_ticks():
    """(busy, total) CPU time of the whole machine, in clock ticks, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return sum(v[:8]) - v[3] - v[4], sum(v[:8])


def run(cmd, who):
    """bench_step's json line, the share of the CPU time others took meanwhile,
    and bench_step's output. who names the driver in the error when it fails."""
    hz = os.sysconf("SC_CLK_TCK")
    b0, t0 = cpu_ticks()
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(cmd, capture_output=True, text=True)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    b1, t1 = cpu_ticks()
    if p.returncode != 0:
        sys.stderr.write(p.stdout + p.stderr)
        raise SystemExit("%s: %s failed (exit %d)" % (who, cmd[0], p.returncode))
    ours = (r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime) * hz
    foreign = max(0.0, (b1 - b0) - ours) / max(1, t1 - t0)
    line = next(l for l in p.stdout.splitlines() if l.startswith("json: "))
    return json.loads(line[len("json: "):]), foreign, p.stdout
