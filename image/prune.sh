#!/bin/sh
# What the image leaves out of its root filesystem, run inside it after its packages are
# installed: by ../Dockerfile and by tests/harness/image_build.py, so both cut the same.
# Each is safe for a read-only root that runs only the exporter: apt's package lists (no
# apt-get at run time), documentation but each package's copyright file (kept: the image
# redistributes the binaries), man and info pages, translations (the exporter logs in
# English), and debconf's old templates. README.md ("The container image") gives what each
# saved, measured. The JVM's class-data archive is not touched: it halves Spark's start.
set -eu
rm -rf /var/lib/apt/lists/* /var/cache/apt/* /var/cache/debconf/*-old \
    /usr/share/man/* /usr/share/info/* /usr/share/locale/* /usr/share/lintian
find /usr/share/doc -mindepth 1 ! -type d ! -name copyright -delete
find /usr/share/doc -mindepth 1 -type d -empty -delete
