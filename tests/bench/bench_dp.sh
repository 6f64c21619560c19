#!/usr/bin/env bash
# tests/bench/bench_dp.sh - data parallel scaling of larch-train on this
# machine: the same global batch on 1 rank and on N ranks (mpirun), one
# thread per rank, side by side in A/B rounds.
#
#   tests/bench/bench_dp.sh [BUILD] [--ranks N] [--rounds R] [--steps S]
#                           [--hidden 2048,2048] [--batch 1024] [--bucket-mb 4]
#                           [--zero 0|1] [--precision fp32|fp16|bf16]
#
# BUILD (default build) holds trainer/larch-train and tests/bench/bench_allreduce.
# The model is a Fashion-MNIST MLP large enough for its GEMMs to dominate a
# step (hidden 2048x2048: 5.8 M parameters, 23 MiB of gradients per step) at
# 512 samples per rank; 4 MiB buckets (larch-train's default is DDP's 25 MiB,
# which is one bucket here: nothing to overlap).
# Prints per round the samples/s of each (larch-train's "done:" line, which
# times the training steps only), the scaling efficiency
# rate(N) / (N x rate(1)), and the share of the gradient communication hidden
# behind the backward pass (the "parallel:" line), then medians; and last the
# allreduce throughput of the bucketed path against one plain MPI_Allreduce of
# the same bytes (bench_allreduce). --zero 1: the N ranks run ZeRO-1;
# --precision: both runs compute in that dtype. Never fails on timing.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build ranks=2 rounds=3 steps=30 hidden=2048,2048 batch=1024 bucket_mb=4 zero=0 precision=fp32
while [ $# -gt 0 ]; do
	case "$1" in
	--ranks) ranks=$2; shift 2 ;;
	--rounds) rounds=$2; shift 2 ;;
	--steps) steps=$2; shift 2 ;;
	--hidden) hidden=$2; shift 2 ;;
	--batch) batch=$2; shift 2 ;;
	--bucket-mb) bucket_mb=$2; shift 2 ;;
	--zero) zero=$2; shift 2 ;;
	--precision) precision=$2; shift 2 ;;
	-h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench_dp: unknown argument $1" >&2; exit 2 ;;
	*) build=$1; shift ;;
	esac
done
train=$build/trainer/larch-train
[ -x "$train" ] || { echo "bench_dp: $train is missing: build first" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "bench_dp: mpirun is missing (deploy/install-deps.sh)" >&2; exit 1; }
mpi=(mpirun --oversubscribe --bind-to none)
[ "$(id -u)" -ne 0 ] || mpi+=(--allow-run-as-root)
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

spec() { # RANKS ZERO
	cat <<JSON
{"name": "dp-bench", "model": {"type": "mlp", "hidden": [$hidden]}, "data": {"name": "fashion-mnist"},
 "batch": {"global": $batch}, "optimizer": {"type": "sgd", "lr": 0.05, "momentum": 0.9},
 "steps": $steps, "log_every": $steps, "eval_every": 0, "seed": 1,
 "precision": {"compute": "$precision"},
 "parallel": {"ranks": $1, "bucket_mb": $bucket_mb, "zero_stage": $2}}
JSON
}
spec 1 0 >"$dir/one.json"
spec "$ranks" "$zero" >"$dir/many.json"
rate() { sed -n 's/^done: .* \([0-9.]*\) samples\/s.*/\1/p' "$1"; }
hidden_pct() { sed -n 's/^parallel: .*(\([0-9-]*\)% hidden).*/\1/p' "$1"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }

echo "bench_dp: $(nproc) CPUs; mlp hidden [$hidden], global batch $batch, $steps steps, $precision; 1 rank vs $ranks ranks (ZeRO stage $zero), 1 thread each; $rounds rounds"
printf '%-6s %14s %14s %11s %8s\n' round "1 rank /s" "$ranks ranks /s" efficiency hidden
ones='' manys='' effs='' hids=''
for r in $(seq "$rounds"); do
	run_one() { rm -rf "$dir/j1"; "$train" --spec "$dir/one.json" --job-dir "$dir/j1" --threads 1 >"$dir/one.out" 2>&1; }
	run_many() { rm -rf "$dir/jn"; "${mpi[@]}" -n "$ranks" "$train" --spec "$dir/many.json" --job-dir "$dir/jn" --threads 1 >"$dir/many.out" 2>&1; }
	if [ $((r % 2)) = 1 ]; then run_one; run_many; else run_many; run_one; fi
	a=$(rate "$dir/one.out") b=$(rate "$dir/many.out") h=$(hidden_pct "$dir/many.out")
	[ -n "$a" ] && [ -n "$b" ] || { cat "$dir/one.out" "$dir/many.out" >&2; exit 1; }
	e=$(awk -v a="$a" -v b="$b" -v n="$ranks" 'BEGIN { printf "%.2f", b / (n * a) }')
	ones+="$a " manys+="$b " effs+="$e " hids+="$h "
	printf '%-6s %14s %14s %11s %7s%%\n' "$r" "$a" "$b" "$e" "$h"
done
printf '%-6s %14s %14s %11s %7s%%\n' median "$(echo $ones | median)" "$(echo $manys | median)" \
	"$(echo $effs | median)" "$(echo $hids | median)"
grep '^parallel:' "$dir/many.out" | sed 's/^/    /'
echo
if [ -x "$build/tests/bench/bench_allreduce" ]; then
	"${mpi[@]}" -n "$ranks" "$build/tests/bench/bench_allreduce" --mib 23 --bucket-mib "$bucket_mb" --rounds 5
fi
