#!/bin/sh
# What the image leaves out of the exporter's virtualenv (the directory given), run after the
# package is installed: by ../Dockerfile and by tests/harness/image_build.py. Each is unused
# by a read-only root that only runs the exporter: pip and setuptools (nothing is installed at
# run time; no dependency imports them, pyarrow only tries setuptools_scm), the dependencies'
# own test suites (`tests` directories; `numpy.testing` is a module and stays) and pyarrow's
# C++ headers and sources (for building extensions). README.md gives what each saved.
set -eu
venv=$1
"$venv/bin/python" -m pip uninstall -q -y pip setuptools
site=$(echo "$venv"/lib/python3*/site-packages)
find "$site" -depth -type d -name tests -exec rm -rf {} +
rm -rf "$site/pyarrow/include" "$site/pyarrow/src"
# Last, not a cut: every file's modification time down to the whole second. An image layer's
# tar keeps whole seconds (umoci rounds to the nearest one), and Spark's class-data archive is
# named for its jars' times to the nanosecond (exporter/pipeline/spark/jvmarchive.py): unrounded,
# the image would look for an archive it does not have. Flooring keeps the .pyc files valid
# (they record the whole second of their source's time).
"$venv/bin/python" - "$venv" <<'PY'
import os, sys
for top, dirs, files in os.walk(sys.argv[1]):
    for name in dirs + files:
        path = os.path.join(top, name)
        st = os.lstat(path)
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns // 10**9 * 10**9),
                 follow_symlinks=False)
PY
