#!/usr/bin/env bash
# Install NVIDIA Nsight Systems (CLI `nsys`) from Debian bookworm's non-free
# component. Runs as root. Idempotent.
set -euo pipefail

SOURCES=/etc/apt/sources.list.d/debian.sources

if [[ -f "$SOURCES" ]]; then
    # deb822 format: append "contrib" / "non-free" to each "Components: main ..." line
    # that lacks them (idempotent; other components such as non-free-firmware are kept).
    sed -i -E \
        -e '/^Components:[[:space:]]*main/{/[[:space:]]contrib([[:space:]]|$)/!s/[[:space:]]*$/ contrib/}' \
        -e '/^Components:[[:space:]]*main/{/[[:space:]]non-free([[:space:]]|$)/!s/[[:space:]]*$/ non-free/}' \
        "$SOURCES"
elif [[ -f /etc/apt/sources.list ]]; then
    # Legacy one-line format fallback.
    if ! grep -qE '^deb .*\bnon-free\b' /etc/apt/sources.list; then
        sed -i -E 's/^(deb[[:space:]].*[[:space:]]main)[[:space:]]*$/\1 contrib non-free/' /etc/apt/sources.list
    fi
fi

export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends nsight-systems

# Debian's packaging splits nsys into /usr/lib/nsight-systems/host-linux-x64 (host
# tools, incl. QdstrmImporter) and /usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64
# (the real nsys binary). nsys looks for the host tools next to its resolved path, i.e. in
# /usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64, which the package does not ship,
# so `nsys profile` stops at a .qdstrm ("The importer binary and its dependencies were not
# found"). Point that path at the shipped host directory.
HOST_DIR=/usr/lib/nsight-systems/host-linux-x64
NSYS_REAL=$(readlink -f "$(command -v nsys)")
EXPECTED_HOST_DIR=$(dirname "$(dirname "$NSYS_REAL")")/host-linux-x64
if [[ -d "$HOST_DIR" && ! -e "$EXPECTED_HOST_DIR" ]]; then
    ln -s "$HOST_DIR" "$EXPECTED_HOST_DIR"
fi

nsys --version
