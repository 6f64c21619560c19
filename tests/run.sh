#!/usr/bin/env bash
# tests/run.sh - builds larch twice (release with -Werror, and AddressSanitizer
# + UBSan) and runs the whole suite: the C unit tests under ctest in both
# builds, then pytest (numeric and integration tests) against the release
# build. Every stage runs even when an earlier one failed; the exit status is
# non-zero if any failed. The last line is pytest's summary, or the list of
# failed stages.
set -uo pipefail
cd "$(dirname "$0")/.."

jobs=$(nproc)
python=${PYTHON:-}
if [ -z "$python" ]; then
	# install-deps.sh's virtual environment (Debian's python3 and its python3-*
	# packages, plus schemathesis); another python3 may be first on PATH
	if [ -x .venv/bin/python ]; then python=$PWD/.venv/bin/python
	elif [ -x /usr/bin/python3 ]; then python=/usr/bin/python3
	else python=python3; fi
fi
failed=()

echo "== build (release, -Werror)"
if ! { cmake -S . -B build -G Ninja -DLARCH_WERROR=ON -DWITH_SERVICE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null &&
       cmake --build build -j "$jobs"; }; then
	echo "build failed"
	exit 1
fi
# The sanitizer build's ctest runs the unit tests only: it builds those and
# what they start or load (larch-train; paths in their commands and
# environment that name a target), not larchd, the CLI or the benchmarks,
# which the release build compiles with the same warnings.
unit_targets() {
	ctest --test-dir build-asan -N -V -L unit | grep -o "$PWD/build-asan/[^ ;\"]*" |
		sed 's|.*/||; s|^lib\(.*\)\.so$|\1|' | sort -u |
		comm -12 - <(ninja -C build-asan -t targets all | sed -n 's/^\([^/:]*\): phony$/\1/p' | sort -u)
}
echo "== build (AddressSanitizer + UBSan)"
if ! { cmake -S . -B build-asan -G Ninja -DLARCH_WERROR=ON -DLARCH_SANITIZE=ON -DWITH_SERVICE=ON \
         -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-O1 >/dev/null &&
       targets=$(unit_targets) && [ -n "$targets" ] &&
       cmake --build build-asan -j "$jobs" --target $targets; }; then
	echo "sanitizer build failed"
	exit 1
fi

echo "== ctest (release)"
ctest --test-dir build --output-on-failure -j "$jobs" || failed+=("ctest (release)")
echo "== ctest (AddressSanitizer + UBSan)"
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	ctest --test-dir build-asan -L unit --output-on-failure -j "$jobs" || failed+=("ctest (sanitizers)")

echo "== pytest ($python)"
# --durations: the slowest tests of every run, to keep the suite in its budget
LARCH_BUILD_DIR="$PWD/build" "$python" -m pytest tests -q -ra --durations=25 || failed+=("pytest")

if [ ${#failed[@]} -ne 0 ]; then
	echo "FAILED: ${failed[*]}"
	exit 1
fi
