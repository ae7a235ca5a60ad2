#!/usr/bin/env bash
# Builds the exporter's OCI image without a container engine, as the image tier of the test
# command does (tests/harness/image_build.py, the one builder): the Dockerfile's root
# filesystem by debootstrap and apt (cached under .cache/image/), packed by umoci into an OCI
# layout configured from the Dockerfile. Run as root from anywhere in the checkout, after
# `./dev test --fast` made .venv:  image/build.sh [--layout DIR] [--unpack BUNDLE]
# Then e.g. `skopeo copy oci:.cache/image/oci:latest docker://REGISTRY/pulsar-quota-exporter:TAG`.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "image/build.sh: run as root (debootstrap, chroot)" >&2; exit 2; }
exec .venv/bin/python -m tests.harness.image_build "$@"
