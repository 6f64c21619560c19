#!/usr/bin/env bash
# deploy/fetch-gpu-deps.sh - downloads the Debian 12 packages that a bare GPU
# machine (no apt, no network, no -dev packages) needs to build and test
# larch, into .deps/debs (git-ignored). Nothing is installed here: the files
# travel with the working tree and tests/gpu/run.sh unpacks them there with
# dpkg -x into .deps/prefix. Run on a Debian 12 machine with network access:
#
#   deploy/fetch-gpu-deps.sh
#
# then carry .deps/debs to the GPU machine (see tests/gpu/README.md).
# Needs apt's package lists (apt-get update, as root, once) but no root
# itself; always fetches amd64 packages, the GPU machines' architecture.
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
	# the trainer's C libraries, headers and pkg-config files
	libjansson4 libjansson-dev
	zlib1g zlib1g-dev
	libssl3 libssl-dev
	# BLAS for the CPU kernels (loaded at run time); its Fortran runtime
	libopenblas0-openmp libopenblas0 libgfortran5 libquadmath0
	# pkg-config, in case the machine has none (CMake's FindPkgConfig needs one)
	pkgconf pkgconf-bin libpkgconf3 pkg-config
)

dest=.deps/debs
apt_opts=()
if [ "$(dpkg --print-architecture)" != amd64 ]; then
	# another architecture here: amd64 lists of their own, beside the system's
	lists=/tmp/larch-amd64-lists
	mkdir -p "$lists/partial"
	apt_opts=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 "-oDir::State::Lists=$lists")
	apt-get "${apt_opts[@]}" update -q
fi

rm -rf "$dest"
mkdir -p "$dest"
echo "fetch-gpu-deps: downloading ${#packages[@]} packages into $dest"
# as root, apt's sandbox user could not write here: download as root
[ "$(id -u)" -eq 0 ] && apt_opts+=(-oAPT::Sandbox::User=root)
if ! (cd "$dest" && apt-get "${apt_opts[@]}" download "${packages[@]}"); then
	echo "fetch-gpu-deps: apt-get download failed (stale package lists? run apt-get update as root)" >&2
	exit 1
fi
# plain file names (no %, ~ or +: epochs and Debian revisions), safe for any
# copying tool; dpkg-deb -x does not care about the name
for f in "$dest"/*.deb; do
	base=$(basename "$f")
	safe=$(printf '%s' "$base" | tr -c 'A-Za-z0-9._-' '_')
	[ "$base" = "$safe" ] || mv "$f" "$dest/$safe"
done
ls -l "$dest"
debs=("$dest"/*.deb)
echo "fetch-gpu-deps: $(du -sh "$dest" | cut -f1) in ${#debs[@]} files"
