"""A class-data archive (AppCDS) for the local Spark JVM: half its start-up, once made.

Starting Spark is mostly loading and verifying its classes, and an archive of the classes
those load (`-XX:SharedArchiveFile`, JDK 13+) halves both the context's start and its first
job (docs/design.md, "What makes the start"). The archive (tens of MB) belongs to
one JDK and one class path, so it is made on this machine: after the exporter's first
cycle, if there is none yet, a child process (`python -m exporter.pipeline.spark.archivemake`,
at the lowest CPU priority) starts a context of its own with
`-XX:ArchiveClassesAtExit`, runs the kind of job a cycle runs, and stops; the next start
uses it. Making it at the first start instead would slow that start several times over.

Where: `$XDG_CACHE_HOME/pulsar-quota-exporter/` (else `~/.cache/...`), one file per JDK
and Spark install, named for the files the JVM checks it against (`archive_path`). A
container image makes it at build time (Dockerfile) and points `XDG_CACHE_HOME` there. A
JVM that finds an archive mismatched just starts without it, slowly and silently, so the
name changes with any of those files (and a session started all the same from one it did
not map says so: session.py). A truncated archive is worse: the JDK
17 JVM maps it and dies of SIGBUS (measured). So an archive is used only once a JVM has
started from it (`-Xshare:on`, in a process of its own) and only at the size it had then
(a `.size` stamp beside it); and a session that will not start with it starts without it,
the archive set aside (session.py). A start from an archive touches its stamp; when a new
one is made, the archives made before for the same Spark install (the stamp names it) are
deleted, those of other JDKs and PySparks unused for 30 days, and the least recently used
beyond `KEPT`.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import time
from pathlib import Path

import pyspark

from exporter.pipeline.spark import sparkhome

# The kind of job an archive's classes were loaded by (`make`): a new kind names new archives.
TRAINED_ON = "rdd-python-tasks"
MAKING_SECONDS = 600  # a partial archive older than this was left by a maker that died
# Another JDK's or PySpark's archive (tens of MB each) no start has used for this long is
# deleted when a new one is made: an upgrade would otherwise leave one behind each time.
UNUSED_SECONDS = 30 * 86400
# ... and beyond this many archives in all, the least recently used go too: every fresh
# clone's venv is a Spark install of its own (a machine that clones for CI gathered
# gigabytes of them, each kept for 30 days; docs/design.md, "What makes the start").
KEPT = 3


def java_binary() -> str:
    """The java Spark starts: `$JAVA_HOME/bin/java`, else the first on PATH."""
    home = os.environ.get("JAVA_HOME")
    return os.path.realpath(os.path.join(home, "bin", "java") if home else
                            next((os.path.join(d, "java") for d in os.environ.get(
                                "PATH", "").split(os.pathsep)
                                  if os.path.isfile(os.path.join(d, "java"))), "java"))


def _spark_home() -> str:
    """The Spark install a local session here starts from (sparkhome.py)."""
    return str(sparkhome.local_home())


def _checked_files() -> list[Path]:
    """The files a JVM checks an archive against before it maps it: the JDK's launcher and
    modules image, and each jar of Spark's class path (`$SPARK_HOME/jars`, as
    `bin/spark-class` lists them). A jar not the one the archive was made with (another
    size or modification time) makes the JVM ignore the archive, silently under
    `-Xlog:cds=off`: reinstalling the same PySpark into the same venv did that, and every
    start took twice as long (docs/design.md, "What makes the start")."""
    java = Path(java_binary())
    jars = Path(_spark_home()) / "jars"
    return [java, java.parent.parent / "lib" / "modules", *sorted(jars.glob("*.jar"))]


def archive_path() -> Path:
    """This JDK's and Spark's archive (it may not exist yet): named for the files the JVM
    checks it against, each by path, size and modification time, so a changed one means a
    new archive (made after the first cycle), never a stale one ignored at every start;
    and for the job that trained it (`TRAINED_ON`)."""
    stamps = [TRAINED_ON]
    for f in _checked_files():
        try:
            st = f.stat()
            stamps.append(f"{f}:{st.st_size}:{st.st_mtime_ns}")
        except OSError:
            stamps.append(f"{f}:-")
    key = hashlib.sha256("\n".join(stamps).encode()).hexdigest()[:12]
    return sparkhome.cache_dir() / f"spark-{pyspark.__version__}-{key}.jsa"


def use_flags(path: Path) -> str:
    """The JVM flags to start from `path`; a mismatched archive is ignored quietly."""
    return f"-XX:SharedArchiveFile={path} -Xlog:cds=off -Xlog:cds+dynamic=off"


def _stamp(path: Path) -> Path:
    return path.with_name(path.name + ".size")


def _stamped(path: Path) -> tuple[int, str]:
    """(size, Spark install) in `path`'s stamp: its size when a JVM started from it, and
    the `$SPARK_HOME` it was made for (none in the stamps of older versions)."""
    size, _, home = _stamp(path).read_text().partition("\n")
    return int(size), home.strip()


def usable(path: Path) -> bool:
    """A verified archive, whole: at the size a JVM started from it."""
    try:
        return path.stat().st_size == _stamped(path)[0]
    except (OSError, ValueError):
        return False


def mapped(path: Path, pid: int) -> bool | None:
    """Whether process `pid` maps `path` (/proc/<pid>/maps); None where that cannot be read.
    A JVM that refuses an archive (made from other files) unmaps it and starts without it,
    saying nothing under `-Xlog:cds=off`: only its maps tell."""
    try:
        with open(f"/proc/{pid}/maps") as maps:
            return any(line.rstrip("\n").endswith(f" {path}") for line in maps)
    except OSError:
        return None


def used(path: Path) -> None:
    """A JVM started from `path`: its stamp's time says so (`prune` keeps it)."""
    with contextlib.suppress(OSError):  # a read-only cache: nothing to prune there either
        os.utime(_stamp(path))


def prune(keep: Path, now: float) -> list[Path]:
    """Delete the other archives beside `keep` made for the same Spark install (its files
    have changed since: no JVM will map them again), those no start used for
    `UNUSED_SECONDS` (an unverified one, without a stamp, once older than that too), and
    the least recently used beyond `KEPT` in all; what was deleted. Two installs sharing
    the cache each keep theirs while they start now and then; one reinstalled every day
    keeps one, not thirty."""
    home = _spark_home()
    gone, kept = [], []
    for other in keep.parent.glob("spark-*.jsa"):
        if other == keep:
            continue
        stamped = _stamp(other).exists()
        try:
            last = (_stamp(other) if stamped else other).stat().st_mtime
            replaced = stamped and _stamped(other)[1] == home
        except (OSError, ValueError):
            continue
        if replaced or now - last > UNUSED_SECONDS:
            gone.append(other)
        else:
            kept.append((last, other))
    gone += [other for _, other in sorted(kept, reverse=True)[KEPT - 1:]]
    for other in gone:
        set_aside(other)
    return gone


def set_aside(path: Path) -> None:
    """A JVM would not start from `path`: out of the way (made again after a cycle)."""
    for p in (path, _stamp(path)):
        p.unlink(missing_ok=True)


def adopt(partial: Path, path: Path, size: int) -> None:
    """`partial`, a JVM having started from it at `size` bytes, becomes the archive at
    `path`: stamped, then renamed (no start maps a half-written file), and the archives it
    replaces pruned."""
    _stamp(path).write_text(f"{size}\n{_spark_home()}\n")
    partial.replace(path)
    prune(path, time.time())
