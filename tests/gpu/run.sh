#!/usr/bin/env bash
# tests/gpu/run.sh - the one command for a GPU machine that has the CUDA
# toolkit, CMake and ninja but none of larch's Debian -dev packages and no
# network: unpacks the .deb files that deploy/fetch-gpu-deps.sh fetched into
# .deps/debs (carried along) into .deps/prefix with dpkg -x, points CMake,
# pkg-config, the compiler and the loader there, builds with CUDA (sm_90),
# runs the GPU tests (ctest -L gpu), the CPU unit tests (ctest -L unit), the
# GPU micro-benchmark, GPT-2 124M in larch-train beside PyTorch
# (bench_gpt_gpu.py), the kernel times of a GPT-2 step under ncu
# (profile_gpt.py), compute-sanitizer's racecheck and synccheck over the fused
# attention and its memcheck over the GPU tests.
# Logs go to build-gpu/logs and, when $OUT is set, to $OUT (summary.txt and
# gpu-logs.tar.gz holding them all), refreshed after every step: a call
# killed at its time limit still brings back what the finished steps wrote.
#
#   tests/gpu/run.sh          from anywhere; exit status 0 when all passed
#
# Environment (all optional):
#   LARCH_GPU_BUILD=DIR       build directory (default build-gpu, wiped first)
#   LARCH_GPU_REUSE=1         keep the build directory and build on it (a second
#                             call on a warm machine: seconds instead of minutes)
#   LARCH_GPU_TESTS=0         skip the GPU tests (ctest -L gpu), e.g. for a call
#                             that only runs a benchmark; LARCH_GPU_TESTS_S=N
#                             their time limit (default 300)
#   LARCH_GPU_ONLY="offload gpt"  run only these steps (tests gpt bench racecheck
#                             offload optim profile memcheck unit), whatever the
#                             switches below say: a second call on a warm
#                             machine names what it is for
#   LARCH_GPU_NO_GPU=1        for trying the script on a machine without a
#                             GPU: the GPU tests then skip instead of failing
#   LARCH_GPU_CARRIED_PKGCONFIG=1   use the carried pkgconf even when the
#                             machine has a pkg-config
#   LARCH_GPU_BENCH_ARGS=...  arguments for bench_cuda_kernels (e.g. --quick)
#   LARCH_GPU_UNIT=0          skip the CPU unit tests; LARCH_GPU_BENCH=0 the
#                             micro-benchmark
#   LARCH_GPU_OPTIM=0         skip bench_optim_cpu.sh (the host's optimizer
#                             updates against numpy and the memory bandwidth,
#                             on this machine's cores: issue #8's CPU figure
#                             beyond a 2-core machine); LARCH_GPU_OPTIM_S=N (120)
#   LARCH_GPU_OFFLOAD_BENCH=1 run bench_offload_gpu.py (off by default: minutes);
#                             LARCH_GPU_OFFLOAD_ARGS=..., LARCH_GPU_OFFLOAD_S=N (600)
#   LARCH_GPU_PROFILE=0       skip the ncu kernel-time table of a GPT-2 step;
#                             LARCH_GPU_PROFILE_ARGS=... its arguments (e.g.
#                             --precision fp32), LARCH_GPU_PROFILE_S=N its time
#                             limit (default 180)
#   LARCH_GPU_SANITIZE=0      skip the compute-sanitizer pass;
#   LARCH_GPU_SANITIZE_S=N    its time limit in seconds (default 150);
#   LARCH_GPU_SANITIZE_TESTS="matmul attention"   only those tests (default all)
#   LARCH_GPU_RACECHECK=0     skip compute-sanitizer's racecheck and synccheck
#                             over the fused attention (test_cuda_act16's
#                             test_flash); LARCH_GPU_RACECHECK_S=N (120)
#   LARCH_GPU_GPT_BENCH=0     skip the GPT-2 benchmark; LARCH_GPU_GPT_ARGS=...
#                             its arguments (e.g. --micro 16 --steps 20);
#   LARCH_GPU_GPT_S=N         its time limit in seconds (default 420)
#   LARCH_GPU_DEADLINE_S=N    the whole run's time: no step starts once fewer
#                             than 20 s of N are left, and each step's limit is
#                             cut to what is left (for a device call's
#                             timeout_s: N = timeout_s - 40 leaves the logs time
#                             to come back); steps left out are named in the
#                             summary. After the build the steps go in the
#                             order of what they are worth: GPU tests, GPT-2
#                             benchmark, micro-benchmark, racecheck of the
#                             fused attention, offload benchmark, ncu table,
#                             memcheck, CPU unit tests
#   LARCH_WERROR=ON           -Werror (default OFF: another compiler version
#                             may warn where ours does not; warnings are
#                             counted in the log)
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
build=${LARCH_GPU_BUILD:-$root/build-gpu}
prefix=$root/.deps/prefix
debs=$root/.deps/debs
logs=$build/logs
no_gpu=${LARCH_GPU_NO_GPU:-0}
no_nccl=0
jobs=$(nproc)
start=$(date +%s)
failed=()

if [ "${LARCH_GPU_REUSE:-0}" != 1 ]; then
	rm -rf "$build"
fi
rm -rf "$logs"
mkdir -p "$logs"

deadline=
[ -n "${LARCH_GPU_DEADLINE_S:-}" ] && deadline=$((start + LARCH_GPU_DEADLINE_S))
left_out=()                            # steps the deadline left out
current=start

# summary [RC]: the summary so far (RC empty: the run goes on)
summary() {
	local IFS=';'
	echo "elapsed: $(($(date +%s) - start)) s"
	[ ${#left_out[@]} -eq 0 ] || echo "left out for time: ${left_out[*]}"
	if [ -z "${1:-}" ]; then
		echo "result: running, in step: $current${failed[*]:+; failed so far: ${failed[*]}}"
	elif [ ${#failed[@]} -eq 0 ] && [ "$1" -eq 0 ]; then
		echo "result: all passed"
	else
		echo "result: FAILED: ${failed[*]:-exit status $1}"
	fi
}

# the logs so far to $OUT, where the device tool brings them back from
publish() {
	[ -n "${OUT:-}" ] || return 0
	mkdir -p "$OUT"
	cp "$logs/summary.txt" "$OUT"/ 2>/dev/null || true
	tar -czf "$OUT/gpu-logs.tar.gz" -C "$build" logs 2>/dev/null || true
}

# step NAME...: a step begins; what the last one wrote goes out first
step() {
	current=$*
	summary >"$logs/summary.txt"
	publish
	printf '\n== %s (%ds)\n' "$*" $(($(date +%s) - start))
}

# on NAME VAR DEFAULT: whether step NAME runs: named in LARCH_GPU_ONLY when
# that is set, else when VAR (default DEFAULT) is not 0
on() {
	if [ -n "${LARCH_GPU_ONLY:-}" ]; then
		case " $LARCH_GPU_ONLY " in *" $1 "*) return 0 ;; *) return 1 ;; esac
	fi
	[ "${!2:-$3}" != 0 ]
}

# budget SECONDS NAME: sets lim to SECONDS, or to what the deadline leaves
# if less (cut=1 then); returns 1 (NAME is left out, and named in the
# summary) when under 20 s are left
budget() {
	lim=$1
	cut=0
	[ -n "$deadline" ] || return 0
	local left=$((deadline - $(date +%s)))
	if [ "$left" -lt 20 ]; then
		left_out+=("$2")
		echo "== $2: left out ($left s left of LARCH_GPU_DEADLINE_S)"
		return 1
	fi
	[ "$left" -ge "$lim" ] || { lim=$left; cut=1; }
}

# logged LIMIT LOG NAME OK CMD...: runs CMD for at most LIMIT seconds (then
# SIGTERM, and SIGKILL 10 s later: larch-train takes SIGTERM as "checkpoint
# and stop" and would outlive its script), its output shown and kept in
# LOG; an exit status not among OK (a list such as "0 77") is recorded as a
# failure of NAME, unless the deadline cut LIMIT (budget's cut) and the
# step ran into it: then NAME is named as cut for time
logged() {
	local limit=$1 log=$2 name=$3 ok=$4 rc
	shift 4
	set +e
	timeout -k 10 "$limit" "$@" 2>&1 | tee "$log"
	rc=${PIPESTATUS[0]}
	set -e
	case " $ok " in *" $rc "*) return 0 ;; esac
	if { [ "$rc" = 124 ] || [ "$rc" = 137 ]; } && [ "${cut:-0}" = 1 ]; then
		left_out+=("$name (cut at $limit s by the deadline)")
	elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
		failed+=("$name (stopped at its $limit s limit)")
	else
		failed+=("$name (exit $rc)")
	fi
}

# sanitized TOOL EXE LOG END NAME: EXE under compute-sanitizer's TOOL until
# the time END at most, its verdict appended to LOG (with the tool's report
# when it found something, recorded as a failure of NAME); a run the time
# cuts short is no failure
sanitized() {
	local tool=$1 exe=$2 log=$3 end=$4 name=$5 left rc verdict san
	san=$(command -v compute-sanitizer || ls /usr/local/cuda/bin/compute-sanitizer 2>/dev/null || true)
	left=$((end - $(date +%s)))
	if [ -z "$san" ]; then
		verdict="not run (no compute-sanitizer)"
	elif [ "$left" -le 5 ]; then
		verdict="not run (time)"
	else
		set +e
		timeout -k 10 "$left" "$san" --tool "$tool" --error-exitcode 99 --print-limit 20 "$exe" \
			>"$log.one" 2>&1
		rc=$?
		set -e
		case $rc in
		0) verdict="clean" ;;
		124) verdict="timed out (not an error)" ;;
		*) verdict="FAILED (exit $rc)"; failed+=("$name")
		   grep -E '=========|^FAIL' "$log.one" | head -30 >>"$log" ;;
		esac
		rm -f "$log.one"
	fi
	echo "$tool $(basename "$exe")${CHECK_ONLY:+ ($CHECK_ONLY)}: $verdict" | tee -a "$log"
}

save_logs() {
	local rc=$?
	summary "$rc" | tee "$logs/summary.txt"
	publish
}
trap save_logs EXIT

# ---- the machine ------------------------------------------------------------
step "machine"
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
	export PATH=/usr/local/cuda/bin:$PATH
fi
{
	nvidia-smi || echo "nvidia-smi: not available"
	echo "kernel: $(uname -srm); cpus: $jobs"
	echo "gcc: $(gcc --version | head -1)"
	echo "nvcc: $(nvcc --version 2>/dev/null | tail -1 || echo missing)"
	echo "cmake: $(cmake --version | head -1); ninja: $(ninja --version)"
	echo "pkg-config: $(command -v pkg-config || echo missing); dpkg-deb: $(command -v dpkg-deb || echo missing)"
	cuda_lib=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")/lib64
	echo "CUDA libraries in $cuda_lib:" "$cuda_lib"/lib{cudart,cublas,cublasLt}.so
	echo "system copies of larch's dependencies (ldconfig):"
	ldconfig -p 2>/dev/null | grep -E 'libjansson|libz\.so|libcrypto\.so|libopenblas|libgfortran' || echo "  none"
} 2>&1 | tee "$logs/machine.txt"

# ---- dependencies: .deps/debs -> .deps/prefix ---------------------------------
step "dependencies: unpacking .deps/debs into .deps/prefix"
if ! ls "$debs"/*.deb >/dev/null 2>&1; then
	echo "no .deb files in $debs: run deploy/fetch-gpu-deps.sh on a machine with network" \
	     "and carry .deps/debs" >&2
	failed+=("dependencies")
	exit 1
fi
rm -rf "$prefix"
mkdir -p "$prefix"
for deb in "$debs"/*.deb; do
	if command -v dpkg-deb >/dev/null; then
		dpkg-deb -x "$deb" "$prefix"
	else
		# a .deb is an ar archive holding data.tar.*
		tmp=$(mktemp -d)
		(cd "$tmp" && ar x "$deb" && tar -xf data.tar.* -C "$prefix")
		rm -rf "$tmp"
	fi
done
# absolute symlinks (libz.so -> /lib/...) must point into the prefix
find "$prefix" -type l | while read -r link; do
	target=$(readlink "$link")
	case $target in /*) ln -sfn "$prefix$target" "$link" ;; esac
done
# the .pc files say prefix=/usr
find "$prefix" -name '*.pc' -exec sed -i -e "s|^prefix=/usr\$|prefix=$prefix/usr|" \
	-e "s|=/usr/|=$prefix/usr/|" {} +
multiarch=x86_64-linux-gnu
libdirs=$prefix/usr/lib/$multiarch:$prefix/lib/$multiarch:$prefix/usr/lib/$multiarch/openblas-openmp
export PKG_CONFIG_PATH=$prefix/usr/lib/$multiarch/pkgconfig:$prefix/usr/share/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
export CMAKE_PREFIX_PATH=$prefix/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export CMAKE_LIBRARY_PATH=$prefix/usr/lib/$multiarch:$prefix/lib/$multiarch${CMAKE_LIBRARY_PATH:+:$CMAKE_LIBRARY_PATH}
# C_INCLUDE_PATH rather than CPATH: searched like -isystem, so that -Wall
# stays quiet about the carried headers
export C_INCLUDE_PATH=$prefix/usr/include:$prefix/usr/include/$multiarch${C_INCLUDE_PATH:+:$C_INCLUDE_PATH}
# appended: the machine's own copies, where it has them, come first
export LD_LIBRARY_PATH=${LD_LIBRARY_PATH:+$LD_LIBRARY_PATH:}$libdirs
blas=$prefix/usr/lib/$multiarch/openblas-openmp/libopenblas.so.0
export LARCH_BLAS=${LARCH_BLAS:-$blas}
pkgconfig_args=()
if [ "${LARCH_GPU_CARRIED_PKGCONFIG:-0}" = 1 ] || ! command -v pkg-config >/dev/null; then
	wrapper=$prefix/bin/pkg-config
	mkdir -p "$(dirname "$wrapper")"
	cat >"$wrapper" <<-EOF
	#!/bin/sh
	LD_LIBRARY_PATH="$prefix/usr/lib/$multiarch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$prefix/usr/bin/pkgconf" "\$@"
	EOF
	chmod +x "$wrapper"
	export PKG_CONFIG=$wrapper
	pkgconfig_args=(-DPKG_CONFIG_EXECUTABLE="$wrapper")
	echo "pkg-config: the carried pkgconf ($("$wrapper" --version))"
fi
echo "prefix: $prefix ($(du -sh "$prefix" | cut -f1)); LARCH_BLAS=$LARCH_BLAS"

# NCCL (the device communicator): the toolkit's, else the one PyTorch's wheel
# brings (nvidia/nccl: include/nccl.h, lib/libnccl.so.2)
nvcc_root=$(dirname "$(dirname "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")
if [ -z "${NCCL_ROOT:-}" ] && [ ! -e "$nvcc_root/include/nccl.h" ]; then
	NCCL_ROOT=$(python3 -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null || true)
	if [ -n "$NCCL_ROOT" ]; then
		export NCCL_ROOT
		echo "NCCL: PyTorch's, $NCCL_ROOT"
	else
		echo "NCCL: none found (the device communicator's test will skip)"
		no_nccl=1
	fi
fi

# ---- configure and build ------------------------------------------------------
step "configure (WITH_CUDA=ON, sm_90, WITH_MPI=OFF)"
if ! cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DWITH_CUDA=ON -DWITH_MPI=OFF -DCMAKE_CUDA_ARCHITECTURES=90 \
	-DLARCH_WERROR="${LARCH_WERROR:-OFF}" -DOPENSSL_ROOT_DIR="$prefix/usr" \
	"${pkgconfig_args[@]}" >"$logs/configure.txt" 2>&1; then
	tail -40 "$logs/configure.txt"
	failed+=("configure")
	exit 1
fi
grep -E '^-- (larch|Found|The (C|CUDA) compiler)' "$logs/configure.txt" || true
{
	echo "-- where CMake found the dependencies:"
	grep -E '^(pkgcfg_lib_JANSSON_jansson|JANSSON_INCLUDEDIR|ZLIB_LIBRARY_RELEASE|ZLIB_INCLUDE_DIR|OPENSSL_CRYPTO_LIBRARY|OPENSSL_INCLUDE_DIR|PKG_CONFIG_EXECUTABLE|CMAKE_CUDA_COMPILER|CUDA_cublas_LIBRARY|CUDA_cudart_LIBRARY):' \
		"$build/CMakeCache.txt" | sed 's/^/   /'
} | tee -a "$logs/configure.txt"

step "build (ninja, $jobs jobs)"
if ! cmake --build "$build" -j "$jobs" >"$logs/build.txt" 2>&1; then
	grep -E 'error|FAILED' "$logs/build.txt" | head -40
	tail -30 "$logs/build.txt"
	failed+=("build")
	exit 1
fi
echo "built; $(grep -c 'warning' "$logs/build.txt" || true) warning lines in build.txt"
grep -A3 'warning' "$logs/build.txt" | head -30 || true
echo "larch-train loads:" | tee -a "$logs/build.txt"
ldd "$build/trainer/larch-train" | grep -E 'jansson|libz|crypto|larch' | tee -a "$logs/build.txt" || true
echo "bench_cuda_kernels loads:" | tee -a "$logs/build.txt"
ldd "$build/tests/gpu/bench_cuda_kernels" | grep -E 'cuda|cublas|larch' | tee -a "$logs/build.txt" || true

# ---- GPU tests ----------------------------------------------------------------------
if on tests LARCH_GPU_TESTS 1 && budget "${LARCH_GPU_TESTS_S:-300}" "ctest -L gpu"; then
	step "GPU tests (ctest -L gpu, $lim s at most)"
	logged "$lim" "$logs/ctest-gpu.txt" "ctest -L gpu" 0 \
		ctest --test-dir "$build" -L gpu --output-on-failure -j "$jobs" --timeout 300
	# on a machine with one GPU only test_dp_cuda (two GPUs and MPI) may
	# skip, and test_comm_nccl where no NCCL was found
	skipped=$(sed -n 's/^[[:space:]]*[0-9]* - \(gpu\.[A-Za-z0-9_]*\) (Skipped)$/\1/p' \
		"$logs/ctest-gpu.txt" | tr '\n' ' ')
	unexpected=${skipped//gpu.test_dp_cuda /}
	[ "$no_nccl" = 1 ] && unexpected=${unexpected//gpu.test_comm_nccl /}
	[ -z "$skipped" ] || echo "skipped: $skipped"
	if [ "$no_gpu" != 1 ] && [ -n "${unexpected// /}" ]; then
		echo "GPU tests skipped on a machine that should run them (see machine.txt): $unexpected"
		failed+=("gpu tests skipped: $unexpected")
	fi
fi

# ---- GPT-2 124M: larch-train beside PyTorch ---------------------------------------------
if on gpt LARCH_GPU_GPT_BENCH 1 && [ "$no_gpu" != 1 ] &&
	budget "${LARCH_GPU_GPT_S:-420}" bench_gpt_gpu; then
	step "GPT-2 124M, larch-train beside PyTorch (tests/bench/bench_gpt_gpu.py ${LARCH_GPU_GPT_ARGS:-}; $lim s at most)"
	# shellcheck disable=SC2086
	PYTHONUNBUFFERED=1 logged "$lim" "$logs/bench-gpt.txt" bench_gpt_gpu 0 \
		python3 "$root/tests/bench/bench_gpt_gpu.py" --build "$build" ${LARCH_GPU_GPT_ARGS:-}
fi

# ---- kernel micro-benchmark -------------------------------------------------------------
if on bench LARCH_GPU_BENCH 1 && budget 300 bench_cuda_kernels; then
	step "GPU micro-benchmark (bench_cuda_kernels ${LARCH_GPU_BENCH_ARGS:-}; $lim s at most)"
	ok=0
	[ "$no_gpu" = 1 ] && ok="0 77"
	# shellcheck disable=SC2086
	logged "$lim" "$logs/bench.txt" bench "$ok" "$build/tests/gpu/bench_cuda_kernels" \
		${LARCH_GPU_BENCH_ARGS:-}
fi

# ---- racecheck and synccheck over the fused attention's kernels ---------------------
# (shared memory hazards and barriers: what the CPU emulation can only catch
# by chance)
if on racecheck LARCH_GPU_RACECHECK 1 && [ "$no_gpu" != 1 ] &&
	budget "${LARCH_GPU_RACECHECK_S:-120}" racecheck; then
	step "compute-sanitizer racecheck and synccheck over the fused attention ($lim s at most)"
	end=$(($(date +%s) + lim))
	: >"$logs/racecheck.txt"
	for tool in racecheck synccheck; do
		CHECK_ONLY=test_flash sanitized "$tool" "$build/tests/gpu/test_cuda_act16" \
			"$logs/racecheck.txt" "$end" "$tool test_flash"
	done
fi

# ---- offloading: optimizer offload's cost, the largest model (off by default: long) ----
if on offload LARCH_GPU_OFFLOAD_BENCH 0 && [ "$no_gpu" != 1 ] &&
	budget "${LARCH_GPU_OFFLOAD_S:-600}" bench_offload_gpu; then
	step "offloading on the GPU (tests/bench/bench_offload_gpu.py ${LARCH_GPU_OFFLOAD_ARGS:-}; $lim s at most)"
	# shellcheck disable=SC2086
	PYTHONUNBUFFERED=1 logged "$lim" "$logs/bench-offload.txt" bench_offload_gpu 0 \
		python3 "$root/tests/bench/bench_offload_gpu.py" --build "$build" ${LARCH_GPU_OFFLOAD_ARGS:-}
fi

# ---- the host's optimizer updates on this machine's cores (no GPU needed) -----------
if on optim LARCH_GPU_OPTIM 1 && budget "${LARCH_GPU_OPTIM_S:-120}" bench_optim_cpu; then
	step "CPU optimizer updates against numpy (tests/bench/bench_optim_cpu.sh, $lim s at most)"
	# a Python with numpy: the PATH's (PyTorch's, on the GPU machines) or
	# the system's
	py=
	for p in "$(command -v python3 || true)" /usr/bin/python3; do
		if [ -n "$p" ] && "$p" -c 'import numpy' 2>/dev/null; then
			py=$p
			break
		fi
	done
	logged "$lim" "$logs/bench-optim.txt" bench_optim_cpu 0 \
		bash "$root/tests/bench/bench_optim_cpu.sh" "$build" --rounds 3 ${py:+--python "$py"}
fi

# ---- where a GPT-2 step's GPU time goes (Nsight Compute) ---------------------------
if on profile LARCH_GPU_PROFILE 1 && [ "$no_gpu" != 1 ] &&
	budget "${LARCH_GPU_PROFILE_S:-180}" profile_gpt; then
	step "GPT-2 124M kernel times under ncu (tests/gpu/profile_gpt.py ${LARCH_GPU_PROFILE_ARGS:-}; $lim s at most)"
	# shellcheck disable=SC2086
	PYTHONUNBUFFERED=1 logged "$lim" "$logs/profile.txt" profile_gpt "0 77" \
		python3 "$root/tests/gpu/profile_gpt.py" --build "$build" ${LARCH_GPU_PROFILE_ARGS:-}
fi

# ---- compute-sanitizer memcheck ------------------------------------------------------
if on memcheck LARCH_GPU_SANITIZE 1 && [ "$no_gpu" != 1 ] &&
	budget "${LARCH_GPU_SANITIZE_S:-150}" memcheck; then
	step "compute-sanitizer memcheck over the GPU tests ($lim s at most)"
	end=$(($(date +%s) + lim))
	: >"$logs/sanitizer.txt"
	exes=("$build"/tests/gpu/test_cuda_*)
	if [ -n "${LARCH_GPU_SANITIZE_TESTS:-}" ]; then
		exes=()
		for name in $LARCH_GPU_SANITIZE_TESTS; do
			exes+=("$build/tests/gpu/test_cuda_$name")
		done
	fi
	for exe in "${exes[@]}"; do
		sanitized memcheck "$exe" "$logs/sanitizer.txt" "$end" "memcheck $(basename "$exe")"
	done
fi

# ---- CPU unit tests (CI runs them too: last) -------------------------------------------
if on unit LARCH_GPU_UNIT 1 && budget 300 "ctest -L unit"; then
	step "CPU unit tests (ctest -L unit, $lim s at most)"
	logged "$lim" "$logs/ctest-unit.txt" "ctest -L unit" 0 \
		ctest --test-dir "$build" -L unit --output-on-failure -j "$jobs" --timeout 300
fi

current=end
[ ${#failed[@]} -eq 0 ]
