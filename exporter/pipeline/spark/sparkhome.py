"""The Spark install a local JVM starts from: PySpark's, without the jars of Spark's other
modules.

PySpark ships the jars of all of Spark (279 in 4.3.0: SQL, Hive, Connect, MLlib, Kubernetes,
YARN ...), and the JVM opens every jar on its class path: a lookup that misses, or a service
loader, searches them all. An open jar keeps its central directory on the heap (JDK 9+
`java.util.zip.ZipFile$Source`), with an index of them beside it. A cycle's job needs Spark
Core alone (pipeline/scrape.py), so the local JVM of an exporter whose operator set no
`SPARK_HOME` starts from links under the cache directory (beside the class-data archive,
jvmarchive.py): every entry of PySpark's install, and of its jars all but those of
`OTHER_MODULES`. The list names what Spark Core cannot need (the modules built on it, and
the libraries only they use) rather than what it needs: a jar a new PySpark adds is kept, so
a new dependency of Spark Core is never left out. (Spark Core of 4.3.0 loads Ivy's classes
at start-up and a new `spark-udf-worker-core` with its context: both are kept, as everything
not named is.)

It links about half of the jars, and the JVM holds less for it at no cost to the first
cycle (`tests.bench.footprint`; docs/design.md, "Start-up and memory").

An operator's own `SPARK_HOME` is used as it is; so is PySpark's install when the cache
cannot be written. A cluster's JVMs are not ours: only local masters use this.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from pyspark.find_spark_home import _find_spark_home

log = logging.getLogger(__name__)

# Jars of Spark's modules other than Core, and of libraries only those use; by the start
# of the file name.
OTHER_MODULES = re.compile("|".join([
    # Spark's SQL, Connect, Hive, MLlib, GraphX, streaming, REPL, pipelines, cluster
    # managers other than standalone
    r"spark-(?:catalyst|sql|sql-api|connect|hive|hive-thriftserver|mllib|mllib-local|graphx"
    r"|streaming|repl|pipelines|sketch|kubernetes|yarn)_",
    r"connect-repl",
    # SQL: the parser, code generation, file formats, Arrow (the JVM's, for SQL's Python
    # UDFs), CSV, geometry, sketches (not ICU4J nor spark-variant: spark-unsafe, which
    # Spark Core depends on, depends on them)
    r"antlr", r"ST4-", r"janino-", r"commons-compiler-", r"orc-", r"parquet-", r"arrow-",
    r"flatbuffers-java-", r"univocity-parsers-", r"super-csv-", r"opencsv-", r"jts-core-",
    r"datasketches-", r"threeten-extra-", r"xmlschema-core-", r"java-diff-utils-",
    r"aircompressor-",
    # Hive and its metastore
    r"hive-", r"datanucleus-", r"derby", r"javax\.jdo-", r"jdo-api-", r"HikariCP-",
    r"commons-dbcp-", r"commons-pool-", r"libthrift-", r"libfb303-", r"jpam-", r"jta-",
    r"transaction-api-", r"javolution-", r"jline-", r"commons-cli-",
    # MLlib's linear algebra
    r"breeze", r"spire", r"algebra_", r"cats-kernel_", r"arpack", r"lapack-", r"blas-",
    r"JTransforms-", r"JLargeArrays-", r"scala-compiler-",
    # Kubernetes
    r"kubernetes-", r"volcano-", r"vertx-", r"zjsonpatch-",
]))


def pyspark_home() -> Path:
    """PySpark's own install (or the operator's `SPARK_HOME`)."""
    return Path(os.path.realpath(_find_spark_home()))


def core_home(cache: Path, full: Path) -> Path:
    """The links install for `full` under `cache`, made or remade when `full`'s entries or
    jars are not those it links; one directory per PySpark install, named for its path."""
    wanted = _entries(full)
    home = cache / f"spark-home-{hashlib.sha256(str(full).encode()).hexdigest()[:12]}"
    if _linked(home) == wanted:
        return home
    cache.mkdir(parents=True, exist_ok=True)
    made = Path(tempfile.mkdtemp(prefix=home.name + ".", suffix=".tmp", dir=cache))
    made.chmod(0o755)  # not mkdtemp's 0700: an image makes it as root for another user
    for name, target in wanted.items():
        (made / name).parent.mkdir(exist_ok=True)
        (made / name).symlink_to(target)
    old = home.with_name(home.name + f".{os.getpid()}.old")
    if home.exists():
        home.rename(old)
    try:
        made.rename(home)
    except OSError:  # another exporter made it meanwhile
        shutil.rmtree(made, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)
    return home


def _entries(full: Path) -> dict[str, Path]:
    """What the links install holds: `relative name → target`."""
    out = {e.name: e for e in sorted(full.iterdir()) if e.name != "jars"}
    out.update({f"jars/{j.name}": j for j in sorted((full / "jars").glob("*.jar"))
                if not OTHER_MODULES.match(j.name)})
    return out


def _linked(home: Path) -> dict[str, Path] | None:
    try:
        out = {e.name: e.readlink() for e in home.iterdir() if e.name != "jars"}
        out.update({f"jars/{j.name}": j.readlink() for j in (home / "jars").iterdir()})
    except OSError:
        return None
    return out


def cache_dir() -> Path:
    """Where the exporter keeps what it makes for this machine's JVM (`$XDG_CACHE_HOME`,
    else `~/.cache`)."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "pulsar-quota-exporter"


def local_home() -> Path:
    """The install a local JVM starts from: the operator's `SPARK_HOME` if set, else
    `core_home` of PySpark's, else (a cache that cannot be written) PySpark's."""
    if os.environ.get("SPARK_HOME"):
        return pyspark_home()
    try:
        return core_home(cache_dir(), pyspark_home())
    except OSError as exc:
        log.info("Spark starts from PySpark's install, with all its jars (%s)", exc)
        return pyspark_home()


@contextmanager
def launching_from(home: Path | None) -> Iterator[None]:
    """PySpark launches its JVM from `$SPARK_HOME`: `home` (if not None) while the block
    runs, the environment as it was after it."""
    if home is None:
        yield
        return
    was = os.environ.get("SPARK_HOME")
    os.environ["SPARK_HOME"] = str(home)
    try:
        yield
    finally:
        if was is None:
            del os.environ["SPARK_HOME"]
        else:
            os.environ["SPARK_HOME"] = was
