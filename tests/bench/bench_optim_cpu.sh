#!/usr/bin/env bash
# tests/bench/bench_optim_cpu.sh - larch's CPU optimizer updates against
# numpy and against the memory bandwidth, side by side in A/B rounds.
#
#   tests/bench/bench_optim_cpu.sh [BUILD] [--rounds 5] [--reps 3] [--n 67108864]
#                                  [--threads $(nproc)] [--python PY]
#
# BUILD (default build) holds tests/bench/bench_optim_cpu and
# kernels/liblarch_kernels.so. Each round runs, in turn (the order swapped
# every other round):
#  - one round of bench_optim_cpu: --reps calls of each case (AdamW on the
#    ISA the library chose, on each ISA the CPU has, and on one thread; SGD,
#    LARS, LAMB's three passes, sumsq, scale) and of the bounds ("stream", a
#    loop with AdamW's traffic, 4 reads and 3 writes an element; "read";
#    "copy"), on --n floats a buffer;
#  - bench_optim_cpu.py (--python, default .venv/bin/python, else
#    /usr/bin/python3): the same AdamW in numpy, in place, beside larch's
#    kern_adamw_update_cpu called through ctypes in the same process, two
#    A/B rounds of --reps steps each.
# Prints per round larch's AdamW, the bound (stream's GB/s / 28 B) and their
# ratio (same process), numpy's AdamW, larch's beside it and their ratio (same
# process), then the medians of each and of the per-round ratios against
# the targets (larch/numpy >= 5, larch/bound >= 0.7), and a table of every
# case. Never fails on timing.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=build rounds=5 reps=3 n=$((64 << 20)) threads=$(nproc) python=
while [ $# -gt 0 ]; do
	case "$1" in
	--rounds) rounds=$2; shift 2 ;;
	--reps) reps=$2; shift 2 ;;
	--n) n=$2; shift 2 ;;
	--threads) threads=$2; shift 2 ;;
	--python) python=$2; shift 2 ;;
	-h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	-*) echo "bench_optim_cpu: unknown argument $1" >&2; exit 2 ;;
	*) build=$1; shift ;;
	esac
done
bench=$build/tests/bench/bench_optim_cpu
lib=$build/kernels/liblarch_kernels.so
[ -x "$bench" ] && [ -f "$lib" ] || { echo "bench_optim_cpu: $bench or $lib is missing: build first" >&2; exit 1; }
if [ -z "$python" ]; then
	python=/usr/bin/python3
	[ -x .venv/bin/python ] && python=.venv/bin/python
fi
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT

median() { tr ' ' '\n' | grep . | sort -g | awk '{ a[NR] = $1 } END { print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
# the value of case $2 in the raw lines of file $1 (elements/s)
val() { awk -v c="$2" '$1 == "raw" && $2 == c { print $3 }' "$1"; }
fmt() { awk -v x="$1" 'BEGIN { printf "%.1f", x / 1e6 }'; }
div() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }

run_larch() { OMP_NUM_THREADS=$threads "$bench" --rounds 1 --reps "$reps" --n "$n" --threads "$threads" --raw >"$dir/larch.$1"; }
run_numpy() { OMP_NUM_THREADS=$threads "$python" tests/bench/bench_optim_cpu.py --rounds 2 --reps "$reps" --n "$n" --larch "$lib" --raw >"$dir/numpy.$1"; }

head=$(OMP_NUM_THREADS=$threads "$bench" --rounds 1 --reps 1 --n 4096 --threads "$threads" | sed -n 2p)
echo "bench_optim_cpu: $(nproc) CPUs, $threads threads, $n floats a buffer ($((n * 4 >> 20)) MiB), $rounds rounds of $reps steps"
echo "$head"
echo "numpy: $("$python" -c 'import numpy, sys; print(numpy.__version__, "on", sys.executable)')"
printf '%-6s %8s %8s %12s %8s %14s %12s\n' round larch bound larch/bound numpy "larch beside" larch/numpy
echo "       (Melem/s; larch and the bound in bench_optim_cpu, numpy and larch beside it in python)"
ls='' bs='' rb='' ns='' ps='' rn=''
for r in $(seq "$rounds"); do
	if [ $((r % 2)) = 1 ]; then run_larch "$r"; run_numpy "$r"; else run_numpy "$r"; run_larch "$r"; fi
	l=$(val "$dir/larch.$r" adamw) b=$(val "$dir/larch.$r" stream)
	np=$(val "$dir/numpy.$r" numpy) p=$(val "$dir/numpy.$r" larch) q=$(val "$dir/numpy.$r" larch/numpy)
	[ -n "$l" ] && [ -n "$b" ] && [ -n "$np" ] && [ -n "$q" ] || { cat "$dir/larch.$r" "$dir/numpy.$r" >&2; exit 1; }
	ls+="$l " bs+="$b " rb+="$(div "$l" "$b") " ns+="$np " ps+="$p " rn+="$q "
	printf '%-6s %8s %8s %12s %8s %14s %12s\n' "$r" "$(fmt "$l")" "$(fmt "$b")" "$(div "$l" "$b")" \
		"$(fmt "$np")" "$(fmt "$p")" "$(div "$q" 1)"
done
mn=$(div "$(echo $rn | median)" 1) mb=$(div "$(echo $rb | median)" 1)
printf '%-6s %8s %8s %12s %8s %14s %12s\n' median "$(fmt "$(echo $ls | median)")" \
	"$(fmt "$(echo $bs | median)")" "$mb" "$(fmt "$(echo $ns | median)")" \
	"$(fmt "$(echo $ps | median)")" "$mn"
verdict() { awk -v x="$1" -v t="$2" 'BEGIN { print (x >= t) ? "met" : "not met" }'; }
echo "AdamW larch/numpy ${mn}x (target >= 5: $(verdict "$mn" 5)); larch/bound ${mb}x (target >= 0.7: $(verdict "$mb" 0.7))"
nb=$(awk '$1 == "raw" && $2 == "numpy" { print $4 }' "$dir/numpy.1")
nbw=$(awk -v x="$(echo $ns | median)" -v b="$nb" 'BEGIN { printf "%.2f", x * b / 1e9 }')
sbw=$(awk -v x="$(echo $bs | median)" 'BEGIN { printf "%.2f", x * 28 / 1e9 }')
echo "numpy moves $nb B an element in its passes, $nbw GB/s (stream: $sbw GB/s):" \
	"at equal bandwidth larch/numpy would be $(div "$nb" 28)x"
echo

# every case: median elements/s and GB/s over the rounds, and the median of
# the per-round ratios to its bound (read for sumsq, stream.1t for the
# one-thread cases, stream for the others)
echo "all cases, medians of $rounds rounds:"
printf '%-14s %12s %9s %9s\n' case Melem/s GB/s "x bound"
for c in $(awk '$1 == "raw" { print $2 }' "$dir/larch.1"); do
	case $c in
	sumsq|read) bc=read ;;
	*.1t) bc=stream.1t ;;
	*) bc=stream ;;
	esac
	bytes=$(awk -v c="$c" '$1 == "raw" && $2 == c { print $4 }' "$dir/larch.1")
	bbytes=$(awk -v c="$bc" '$1 == "raw" && $2 == c { print $4 }' "$dir/larch.1")
	vs='' rs=''
	for r in $(seq "$rounds"); do
		v=$(val "$dir/larch.$r" "$c") vb=$(val "$dir/larch.$r" "$bc")
		vs+="$v " rs+="$(awk -v a="$v" -v b="$vb" -v x="$bytes" -v y="$bbytes" 'BEGIN { printf "%.4f", a * x / (b * y) }') "
	done
	v=$(echo $vs | median)
	printf '%-14s %12s %9s %9s\n' "$c" "$(fmt "$v")" "$(awk -v a="$v" -v x="$bytes" 'BEGIN { printf "%.2f", a * x / 1e9 }')" \
		"$(awk -v x="$(echo $rs | median)" 'BEGIN { printf "%.2f", x }')"
done
echo "(adamw.1t: one thread; lamb: ||w||^2, moments with ||u||^2, apply: 44 B an element;"
echo " copy counts 8 B an element, not the read-for-ownership of its stores)"
