#!/usr/bin/env python3
"""tests/gpu/profile_gpt.py - where a GPT training step's GPU time goes: runs
larch-train (--device cuda) on GPT-2 124M for a few steps under Nsight
Compute, reading one metric (gpu__time_duration.sum) per kernel, and prints
the kernels grouped by name: time per step, launches per step, share
(--by-grid: by name and grid, ncu's launch__grid_size, so that a GEMM
kernel's problems show apart and a grid of fewer blocks than SMs shows).

    python3 tests/gpu/profile_gpt.py --build build-gpu [--precision bf16]
                                     [--micro 8] [--steps 2] [--layers 12]
                                     [--nondeterministic] [--by-grid]
                                     [--detail REGEX [--detail-count 48]]

ncu runs the kernels one at a time (--cache-control none, --clock-control
none), so the sum is the step's kernel time without overlap or launch gaps;
the step's wall time beside it (from a run without ncu) shows what the gaps
cost. The validation pass at the end is left out by giving the run no
validation set. --nondeterministic profiles the spec's "deterministic":
false (tuned GEMMs, attention's dq added atomically): the run under ncu
takes the plain run's GEMM picks (its gemm-tune.txt), so that no tuning
runs are among its kernels; every run under ncu takes the plain run's
picks of the kernels' same-bits variants likewise (LARCH_CUDA_KERNEL_PICKS). Exit 77 when ncu or a GPU is missing.

--detail REGEX profiles the first --detail-count launches of the kernels
whose names match (ncu's --kernel-name regex, e.g. "fa_|xent|dbias") once
more with ncu's occupancy, warp-state, scheduler and workload sections,
and prints per kernel what says where its time goes: registers, achieved
against theoretical occupancy, issue slots busy, warp cycles per issued
instruction and the largest stall reasons in those cycles, the busiest
pipes (tensor, FMA, ALU, XU: the SFU's exponentials), shared memory's
bank conflicts and DRAM throughput. --self-test checks that report on a
table in ncu's raw CSV layout and exits (no GPU needed).
"""
import argparse
import collections
import csv
import io
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "bench"))
from bench_gpt_gpu import write_tokens  # noqa: E402


def find_ncu():
    for cand in (shutil.which("ncu"), "/usr/local/cuda/bin/ncu"):
        if cand and os.access(cand, os.X_OK):
            return cand
    found = sorted(pathlib.Path("/opt/nvidia").glob("nsight-compute/*/ncu"))
    return str(found[-1]) if found else None


def variant_picks(stderr):
    """The KEY=N picks of the kernels' variants a run timed, from its stderr
    ("larch: kernels timed: KEY=N (name): ..."), for LARCH_CUDA_KERNEL_PICKS:
    a run under ncu takes them instead of timing (its kernels run one at a
    time there, and the timing runs would be among the kernels counted)."""
    return re.findall(r"larch: kernels timed: (\S+=\d+) ", stderr)


def spec_for(a, tmp):
    return {"name": f"profile-{a.precision}",
            "precision": {"compute": a.precision, "deterministic": not a.nondeterministic},
            "model": {"type": "gpt", "layers": a.layers, "heads": a.heads, "dim": a.dim,
                      "seq": a.seq, "vocab": a.vocab},
            "data": {"format": "tokens_u16", "train": str(tmp / "train.bin")},
            "batch": {"global": a.micro, "micro": a.micro},
            "optimizer": {"type": "adamw", "lr": 6e-4, "betas": [0.9, 0.95],
                          "weight_decay": 0.1},
            "steps": a.steps, "log_every": 1, "seed": 1, "checkpoint_at_end": False}


def short(name):
    """cuBLAS kernel names run to hundreds of characters; keep the head."""
    name = name.split("(")[0]
    return name if len(name) <= 70 else name[:67] + "..."


# --detail: ncu's sections, and what of their raw metrics the report shows
DETAIL_SECTIONS = ["LaunchStats", "Occupancy", "WarpStateStats", "SchedulerStats",
                   "ComputeWorkloadAnalysis", "MemoryWorkloadAnalysis", "SpeedOfLight"]
DETAIL_FIXED = [  # (label, metric): shown where the table has the column
    ("registers/thread", "launch__registers_per_thread"),
    ("theoretical occupancy %", "sm__maximum_warps_per_active_cycle_pct"),
    ("achieved occupancy %", "sm__warps_active.avg.pct_of_peak_sustained_active"),
    ("issue slots busy %", "smsp__issue_active.avg.pct_of_peak_sustained_active"),
    ("warp cycles / issued inst", "smsp__average_warp_latency_per_inst_issued.ratio"),
    ("SM throughput %", "sm__throughput.avg.pct_of_peak_sustained_elapsed"),
    ("DRAM throughput %", "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"),
    ("shared bank conflicts", "l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum"),
    ("shared wavefronts", "l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"),
]
STALL = "smsp__average_warps_issue_stalled_"
STALL_END = "_per_issue_active.ratio"


def time_table(rows, by_grid=False):
    """ncu's rows (one a launch) -> ({kernel: [ns, launches]}, total ns); with
    by_grid each kernel's launches apart by their grid's blocks ("name [grid
    N]"), so that one GEMM kernel's problems show apart, a grid short of the
    SMs among them"""
    per = collections.defaultdict(lambda: [0.0, 0])
    total = 0.0
    for r in rows:
        ns = float(r["gpu__time_duration.sum"].replace(",", ""))
        name = short(r["Kernel Name"])
        grid = (r.get("launch__grid_size") or "").replace(",", "")
        if by_grid and grid:
            name = f"{name} [grid {int(float(grid))}]"
        per[name][0] += ns
        per[name][1] += 1
        total += ns
    return per, total


def detail_rows(text):
    """ncu --csv --page raw output -> {kernel: {metric: mean over its launches}}, the
    kernels in the order of their first launch; cells that are not numbers are left out"""
    text = text[text.find('"ID"'):]
    out = {}
    counts = collections.Counter()
    for r in csv.DictReader(io.StringIO(text)):
        if not r.get("ID", "").isdigit():
            continue              # the units row
        name = short(r["Kernel Name"])
        counts[name] += 1
        acc = out.setdefault(name, {})
        for k, v in r.items():
            try:
                x = float((v or "").replace(",", ""))
            except ValueError:
                continue
            acc[k] = acc.get(k, 0.0) + x
    for name, acc in out.items():
        for k in acc:
            acc[k] /= counts[name]
        acc["launches"] = counts[name]
    return out


def detail_report(per, stalls=5, pipes=4):
    """lines for detail_rows' kernels: the fixed metrics, the largest stall reasons
    (warps stalled per issued instruction, whose sum is about the warp cycles per issued
    instruction) and the busiest pipes (% of peak while active)"""
    lines = []
    for name, m in per.items():
        lines.append(f"{name} ({int(m['launches'])} launches)")
        fixed = [f"{label} {m[key]:.4g}" for label, key in DETAIL_FIXED if key in m]
        lines.append("  " + "; ".join(fixed))
        st = sorted((-v, k[len(STALL):-len(STALL_END)]) for k, v in m.items()
                    if k.startswith(STALL) and k.endswith(STALL_END)
                    and not k.endswith("_not_issued" + STALL_END))
        if st:
            lines.append("  stalls (cycles per issue): " +
                         ", ".join(f"{k} {-v:.2f}" for v, k in st[:stalls]))
        pp = sorted((-v, k) for k, v in m.items()
                    if k.startswith("sm__") and "pipe_" in k
                    and k.endswith(".avg.pct_of_peak_sustained_active"))
        if pp:
            lines.append("  pipes (% of peak, active): " + ", ".join(
                f"{k[len('sm__'):-len('.avg.pct_of_peak_sustained_active')]} {-v:.1f}"
                for v, k in pp[:pipes]))
    return lines


def self_test():
    """detail_rows and detail_report on a table in ncu's raw CSV layout, and
    variant_picks on a run's stderr"""
    head = ["ID", "Kernel Name", "launch__registers_per_thread",
            "sm__warps_active.avg.pct_of_peak_sustained_active",
            STALL + "barrier" + STALL_END, STALL + "long_scoreboard" + STALL_END,
            STALL + "math_pipe_throttle" + STALL_END, STALL + "not_issued" + STALL_END,
            "sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active",
            "sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"]
    units = ["", "", "register/thread", "%", "", "", "", "", "%", "%"]
    rows = [["0", "fa_fwd_kernel<__nv_bfloat16, true, 1>(unsigned short*, float*)", "126",
             "60", "1.5", "0.5", "3", "9", "40", "30"],
            ["1", "xent_fwd_bwd_kernel(float*)", "40", "90", "0.1", "6", "0.2", "9", "0", "5"],
            ["2", "fa_fwd_kernel<__nv_bfloat16, true, 1>(unsigned short*, float*)", "126",
             "70", "2.5", "0.5", "1", "9", "50", "n/a"]]
    buf = io.StringIO()
    w = csv.writer(buf, quoting=csv.QUOTE_ALL)
    w.writerow(head)
    w.writerow(units)
    w.writerows(rows)
    per = detail_rows("==PROF== a line before the table\n" + buf.getvalue())
    assert list(per) == ["fa_fwd_kernel<__nv_bfloat16, true, 1>", "xent_fwd_bwd_kernel"], per
    fa = per["fa_fwd_kernel<__nv_bfloat16, true, 1>"]
    assert fa["launches"] == 2 and fa["launch__registers_per_thread"] == 126
    assert fa["sm__warps_active.avg.pct_of_peak_sustained_active"] == 65
    assert fa["sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active"] == 15  # n/a left out
    text = "\n".join(detail_report(per))
    print(text)
    assert "registers/thread 126; achieved occupancy % 65" in text, text
    assert "stalls (cycles per issue): barrier 2.00, math_pipe_throttle 2.00, " \
           "long_scoreboard 0.50" in text, text
    assert "not_issued" not in text, text
    assert "pipes (% of peak, active): pipe_tensor_op_hmma_cycles_active 45.0, " \
           "inst_executed_pipe_xu 15.0" in text, text
    assert "stalls (cycles per issue): long_scoreboard 6.00, math_pipe_throttle 0.20, " \
           "barrier 0.10" in text, text
    err = ("larch: kernels timed: flash-fwd:bf16,b8,t1024,nh12=2 (8 warps): 16 rows a warp "
           "0.4500 ms, 32 rows a warp 0.4700 ms, 8 warps 0.4100 ms\n"
           "larch: cuBLASLt tuned: epilogue 1, ops NT, m 768 n 8192 k 3072: candidate 2 of 8\n"
           "larch: kernels timed: residual-layernorm:bf16,n8192,c768=0 (one kernel): "
           "one kernel 0.0300 ms, two kernels 0.0500 ms\n")
    assert variant_picks(err) == ["flash-fwd:bf16,b8,t1024,nh12=2",
                                  "residual-layernorm:bf16,n8192,c768=0"], variant_picks(err)
    gemm = ("larch: kernels timed: gemm;ops=NT;m=768;n=768;k=8192;ld=768,768,768;types=14,0;"
            "epi=1;aux=0;align=256,256,256,256,0,0;cands=8=0 (cuBLAS): the only way offered\n")
    assert variant_picks(gemm) == ["gemm;ops=NT;m=768;n=768;k=8192;ld=768,768,768;types=14,0;"
                                   "epi=1;aux=0;align=256,256,256,256,0,0;cands=8=0"], \
        variant_picks(gemm)
    launches = [{"ID": "0", "Kernel Name": "sm90_gemm(int)", "gpu__time_duration.sum": "1,000",
                 "launch__grid_size": "36"},
                {"ID": "1", "Kernel Name": "sm90_gemm(int)", "gpu__time_duration.sum": "3000",
                 "launch__grid_size": "264"},
                {"ID": "2", "Kernel Name": "sm90_gemm(int)", "gpu__time_duration.sum": "500",
                 "launch__grid_size": "36"}]
    per, total = time_table(launches)
    assert dict(per) == {"sm90_gemm": [4500.0, 3]} and total == 4500.0, per
    per, _ = time_table(launches, by_grid=True)
    assert dict(per) == {"sm90_gemm [grid 36]": [1500.0, 2],
                         "sm90_gemm [grid 264]": [3000.0, 1]}, per
    print("profile_gpt self-test: ok")
    return 0


def main():
    if "--self-test" in sys.argv[1:]:
        return self_test()
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.environ.get("LARCH_BUILD", "build-gpu"))
    ap.add_argument("--precision", default="bf16", choices=["fp32", "bf16", "fp16"])
    ap.add_argument("--micro", type=int, default=8)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--nondeterministic", action="store_true")
    ap.add_argument("--detail", default=None, metavar="REGEX")
    ap.add_argument("--detail-count", type=int, default=48)
    ap.add_argument("--by-grid", action="store_true",
                    help="each kernel's launches apart by their grid's blocks")
    a = ap.parse_args()
    exe = pathlib.Path(a.build) / "trainer" / "larch-train"
    ncu = find_ncu()
    if ncu is None:
        print("ncu (Nsight Compute) not found: skipping")
        return 77
    probe = subprocess.run([str(exe), "--list-devices"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"no CUDA device: skipping ({probe.stdout.strip()})")
        return 77
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="larch-profile."))
    try:
        write_tokens(tmp / "train.bin", a.micro * a.seq * (a.steps + 2) + 1, a.vocab, 1)
        (tmp / "spec.json").write_text(json.dumps(spec_for(a, tmp)))
        cmd = [str(exe), "--spec", str(tmp / "spec.json"), "--device", "cuda"]
        plain = subprocess.run(cmd + ["--job-dir", str(tmp / "plain")], capture_output=True,
                               text=True)
        if plain.returncode != 0:
            print(plain.stdout[-2000:], plain.stderr[-2000:])
            return 1
        walls = [json.loads(l) for l in (tmp / "plain" / "metrics.jsonl").read_text()
                 .splitlines()]
        tok_s = [m["value"] for m in walls if m["name"] == "train/tokens_per_s"]
        step_ms = [a.micro * a.seq / r * 1e3 for r in tok_s if r > 0]
        picks = tmp / "plain" / "gemm-tune.txt"
        if picks.exists():
            (tmp / "ncu").mkdir()
            shutil.copy(picks, tmp / "ncu" / "gemm-tune.txt")
        # the kernels' variants the plain run timed, taken as they are
        kernel_picks = variant_picks(plain.stderr)
        ncu_env = dict(os.environ, LARCH_CUDA_KERNEL_PICKS=" ".join(kernel_picks))
        for line in kernel_picks:
            print(f"# the plain run's kernel variant: {line}")
        prof = subprocess.run([ncu, "--clock-control", "none", "--cache-control", "none",
                               "--metrics", "gpu__time_duration.sum,launch__grid_size",
                               "--csv", "--page", "raw",
                               "--print-units", "base",
                               *cmd, "--job-dir", str(tmp / "ncu")],
                              capture_output=True, text=True, env=ncu_env)
        if prof.returncode != 0:
            print(prof.stdout[-3000:], prof.stderr[-3000:])
            return 1
        text = prof.stdout[prof.stdout.find('"ID"'):]
        rows = list(csv.DictReader(io.StringIO(text)))
        rows = [r for r in rows if r.get("ID", "").isdigit()]
        per, total = time_table(rows, a.by_grid)
        n = a.steps
        print(f"# GPT L={a.layers} C={a.dim} T={a.seq} V={a.vocab} micro {a.micro}, "
              f"{a.precision}{', nondeterministic' if a.nondeterministic else ''}, {n} steps; "
              f"{len(rows)} kernels in all")
        print(f"# wall per step without ncu: {', '.join(f'{s:.1f}' for s in step_ms)} ms; "
              f"kernel time per step under ncu: {total / n / 1e6:.1f} ms "
              f"(the first step's uploads and set-up included)")
        print(f"{'kernel':72s} {'ms/step':>9s} {'calls/step':>10s} {'share':>6s}")
        for name, (ns, cnt) in sorted(per.items(), key=lambda kv: -kv[1][0])[:a.top]:
            print(f"{name:72s} {ns / n / 1e6:9.3f} {cnt / n:10.1f} {100 * ns / total:5.1f}%")
        if a.detail:
            sections = [x for sec in DETAIL_SECTIONS for x in ("--section", sec)]
            shutil.rmtree(tmp / "ncu", ignore_errors=True)
            if picks.exists():
                (tmp / "ncu").mkdir()
                shutil.copy(picks, tmp / "ncu" / "gemm-tune.txt")
            det = subprocess.run([ncu, "--clock-control", "none", "--cache-control", "none",
                                  "--kernel-name", "regex:" + a.detail,
                                  "--launch-count", str(a.detail_count), *sections,
                                  "--csv", "--page", "raw", "--print-units", "base",
                                  *cmd, "--job-dir", str(tmp / "ncu")],
                                 capture_output=True, text=True, env=ncu_env)
            if det.returncode != 0:
                print(det.stdout[-3000:], det.stderr[-3000:])
                return 1
            print(f"# the first {a.detail_count} launches of the kernels matching "
                  f"{a.detail!r}, ncu's sections {', '.join(DETAIL_SECTIONS)}:")
            for line in detail_report(detail_rows(det.stdout)):
                print(line)
        return 0
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
