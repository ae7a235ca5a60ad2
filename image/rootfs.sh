#!/usr/bin/env bash
# Builds the image's root filesystem without a container engine (none runs here) and runs
# the exporter from it as the image would: Debian bookworm by debootstrap, the packages of
# image/packages.txt, the package in /opt/pulsar-quota-exporter, then, in a mount namespace,
# the root made read-only with a tmpfs on /tmp, and the exporter started by chroot as uid
# 65534 against a pulsar-lite broker on the host. Checks, each printed: it runs as 65534, it
# cannot write its root, Java and Python are the image's, /metrics is scraped and shows the
# broker's topic. Run as root from the checkout: image/rootfs.sh [WORKDIR]  (~10 minutes,
# ~1.3 GB in WORKDIR, default .cache/rootfs; a second run reuses the root filesystem).
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(realpath -m "${1:-.cache/rootfs}")
root=$work/root
venv=/opt/pulsar-quota-exporter
[ "$(id -u)" = 0 ] || { echo "rootfs.sh: run as root (debootstrap, chroot, mounts)" >&2; exit 2; }
command -v debootstrap >/dev/null || apt-get install -y -qq debootstrap >/dev/null
mkdir -p "$work"

if [ ! -x "$root$venv/bin/pulsar-quota-exporter" ]; then
    rm -rf "$root"
    echo "== debootstrap bookworm (minbase) into $root"
    debootstrap --variant=minbase bookworm "$root" http://deb.debian.org/debian >"$work/debootstrap.log"
    cp /etc/resolv.conf "$root/etc/resolv.conf"
    echo "== the image's packages: $(grep -v '^#' image/packages.txt | tr '\n' ' ')"
    unshare -m --propagation private sh -c "
        mount -t proc proc '$root/proc'
        chroot '$root' apt-get update -qq
        grep -v '^#' image/packages.txt | chroot '$root' xargs env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y -qq --no-install-recommends
        chroot '$root' apt-get clean" >"$work/packages.log" 2>&1
    echo "== the package and its dependencies, as wheels fetched here, installed offline"
    rm -rf "$work/wheel" && .venv/bin/python -m pip wheel -q --no-deps -w "$work/wheel" .
    .venv/bin/python -m pip wheel -q -c constraints.txt -w "$work/wheel" "$work"/wheel/*.whl  # builds pyspark's
    mkdir -p "$root/wheel" && cp "$work"/wheel/* "$root/wheel/"  # pyspark is an sdist
    chroot "$root" env -i PATH=/usr/bin:/bin python3 -m venv "$venv"
    chroot "$root" env -i PATH=/usr/bin:/bin HOME=/root "$venv/bin/pip" install -q \
        --no-index --find-links /wheel pulsar-quota-exporter >"$work/pip.log" 2>&1
    rm -rf "$root/wheel" "$root/etc/resolv.conf" "$root/var/lib/apt/lists"/*
    echo "== Spark's class-data archive, as the Dockerfile makes it"
    unshare -m --propagation private sh -c "
        mount -t proc proc '$root/proc'
        chroot '$root' env -i PATH=$venv/bin:/usr/bin:/bin HOME=/tmp \
            XDG_CACHE_HOME=$venv/cache sh -c 'path=\$(python -c \"from exporter.pipeline.jvmarchive import archive_path; print(archive_path())\") && mkdir -p \$(dirname \$path) && python -m exporter.pipeline.jvmarchive \$path && test -s \$path'" \
        >"$work/archive.log" 2>&1
fi
touch "$root/etc/hosts"  # a mount point: the runtime provides the file (as for a container)
echo "== root filesystem: $(du -sh --exclude=proc "$root" | cut -f1)"

# A broker to scrape, on the host (the chroot shares the network), in a fresh directory.
rm -rf "$work/broker"
.venv/bin/python - "$work" <<'PY' &
import json, signal, sys, time
from pathlib import Path
from tests.harness.pulsar import PulsarLite
broker = PulsarLite(Path(sys.argv[1]) / "broker").start()
signal.signal(signal.SIGTERM, lambda *_: (broker.stop(), sys.exit(0)))
broker.create_subscription("persistent://public/default/image-check", "stalled")
broker.produce("persistent://public/default/image-check", 5)
Path(sys.argv[1], "broker.json").write_text(json.dumps({"metrics": broker.metrics_url}))
time.sleep(600)
PY
broker_pid=$!
trap 'kill $broker_pid 2>/dev/null || true; wait $broker_pid 2>/dev/null || true' EXIT
for _ in $(seq 60); do [ -s "$work/broker.json" ] && break; sleep 1; done
metrics_url=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['metrics'])" "$work/broker.json")
rm -f "$work/broker.json"
mkdir -p "$work/etc"
cat >"$work/etc/config.yaml" <<YAML
cluster: image-check
check_interval: 5s
sources:
  brokers: [{url: "$metrics_url"}]
backlog_quotas:
  default: {limit_time: 1h}
exposition:
  listen: 127.0.0.1:10149
spark:
  master: local[1]
YAML
echo "== the exporter from the root filesystem: read-only root, tmpfs /tmp, uid 65534"
unshare -m --propagation private sh -c "
    set -e
    mount --bind '$root' '$root' && mount -o remount,bind,ro '$root'
    mount -t proc proc '$root/proc'
    mount -t tmpfs -o mode=1777 tmpfs '$root/tmp'
    mount -t tmpfs tmpfs '$root/dev' && for d in null zero urandom random; do
        touch '$root/dev/'\$d && mount --bind /dev/\$d '$root/dev/'\$d; done
    ln -s /proc/self/fd '$root/dev/fd'  # as a container runtime provides (spark-class uses it)
    mount --bind /etc/hosts '$root/etc/hosts'  # the runtime's: Spark resolves its host name
    mkdir -p '$root/tmp/etc' && cp '$work/etc/config.yaml' '$root/tmp/etc/config.yaml'
    chroot --userspec=65534:65534 '$root' env -i PATH=$venv/bin:/usr/bin:/bin HOME=/tmp TMPDIR=/tmp XDG_CACHE_HOME=$venv/cache \
        SPARK_LOCAL_DIRS=/tmp PYSPARK_PYTHON=$venv/bin/python sh -c '
        echo \"uid: \$(id -u):\$(id -g)\"
        if touch /probe 2>/dev/null; then echo \"root filesystem: WRITABLE\"; exit 1; fi
        echo \"root filesystem: read-only\"
        echo \"java: \$(java -version 2>&1 | head -1)\"
        echo \"python: \$(command -v python) \$(python --version)\"
        pulsar-quota-exporter validate-config /tmp/etc/config.yaml
        exec pulsar-quota-exporter run --config.file=/tmp/etc/config.yaml' >'$work/exporter.log' 2>&1 &
    for i in \$(seq 120); do
        if python3 - <<PY 2>/dev/null; then exit 0; fi
import urllib.request
body = urllib.request.urlopen('http://127.0.0.1:10149/metrics', timeout=2).read().decode()
assert 'pulsar_quota_exporter_source_up{cluster=\"image-check\"' in body
assert 'persistent://public/default/image-check' in body
print('scraped /metrics: %d lines; the broker source is up:' % len(body.splitlines()))
print([l for l in body.splitlines() if l.startswith('pulsar_quota_exporter_source_up')][0])
print([l for l in body.splitlines() if l.startswith('pulsar_storage_backlog_age_seconds')][0])
PY
        sleep 2
    done
    echo 'no answer from the exporter in time'; exit 1
" && ok=1 || ok=0
head -5 "$work/exporter.log"
pkill -f "config.file=/tmp/etc/config.yaml" 2>/dev/null || true
[ "$ok" = 1 ] && echo "== image check passed" || { echo "== image check FAILED (log: $work/exporter.log)"; exit 1; }
