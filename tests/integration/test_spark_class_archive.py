"""The local Spark JVM's class-data archive (pipeline/spark/jvmarchive.py), made and used for real:
the maker writes it under the cache directory, and a later session's JVM maps it. The JVM
is told `-Xshare:on`, with which an archive it cannot use (another JDK, another class
path, a truncated file) stops the JVM instead of being ignored, so the job only runs if
the archive was good. A jar reinstalled since (same name, new modification time) is what
the JVM refuses an archive for, silently without `-Xshare:on`: the archive's name changes
with it, so no start is handed a stale one, and a start handed one all the same says so.
And an archive gone bad after it was made (truncated: JDK 17 dies of SIGBUS mapping it)
costs a warning, not the start: the context starts without it.

The Spark install here is PySpark's, linked file by file into `SPARK_HOME`, so that one jar
can be reinstalled without touching the venv's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pyspark.find_spark_home import _find_spark_home

# Each subprocess here starts a Spark JVM.
pytestmark = pytest.mark.spark

STARTED_WITH_IT = textwrap.dedent("""
    import sys
    from exporter.config.settings import Spark
    from exporter.pipeline.spark import jvmarchive, session
    path = jvmarchive.archive_path()
    options = session.session_conf(Spark(master="local[2]"))["spark.driver.extraJavaOptions"]
    assert f"-XX:SharedArchiveFile={path}" in options, options
    context = session.get_context(Spark(master="local[2]", conf={
        "spark.driver.extraJavaOptions": options + " -Xshare:on"}))
    print(context.parallelize(range(5), 2).count())
    session.stop()
""")


STARTED_ANYWAY = textwrap.dedent("""
    import logging
    from exporter.config.settings import Spark
    from exporter.pipeline.spark import session
    logging.basicConfig(level=logging.WARNING)
    print(session.get_context(Spark(master="local[2]")).parallelize(range(5), 2).count())
    session.stop()
""")


def _linked_spark_home(at: Path) -> Path:
    """PySpark's Spark install, each jar a link to its own."""
    real = Path(_find_spark_home())
    at.mkdir()
    for entry in real.iterdir():
        if entry.name != "jars":
            (at / entry.name).symlink_to(entry)
    (at / "jars").mkdir()
    for jar in (real / "jars").iterdir():
        (at / "jars" / jar.name).symlink_to(jar)
    return at


def _archive_path(env: dict[str, str]) -> str:
    return subprocess.run([sys.executable, "-c", "from exporter.pipeline.spark import jvmarchive;"
                           "print(jvmarchive.archive_path())"], env=env, capture_output=True,
                          text=True, check=True).stdout.strip()


def _verify(path: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "exporter.pipeline.spark.archivemake", "--verify",
                           path], env=env, capture_output=True, text=True, timeout=300)


def test_the_archive_is_made_once_then_mapped_by_the_next_jvm(tmp_path: Path) -> None:
    home = _linked_spark_home(tmp_path / "spark")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "SPARK_HOME": str(home)}
    where = _archive_path(env)
    archive = Path(where)
    assert archive.parent == tmp_path / "pulsar-quota-exporter"
    archive.parent.mkdir(parents=True)
    made = subprocess.run([sys.executable, "-m", "exporter.pipeline.spark.archivemake", where],
                          env=env, capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr[-2000:]
    assert archive.stat().st_size > 10 << 20  # Spark's classes: ~150 MB measured
    stamp = archive.with_name(archive.name + ".size")
    assert sorted(archive.parent.iterdir()) == [archive, stamp]  # no partial file left
    assert stamp.read_text().splitlines() == [str(archive.stat().st_size), str(home)]
    used = subprocess.run([sys.executable, "-c", STARTED_WITH_IT], env=env,
                          capture_output=True, text=True, timeout=300)
    assert used.returncode == 0, used.stderr[-2000:]
    assert used.stdout.strip().splitlines()[-1] == "5"
    assert "did not map" not in used.stderr  # its maps show it

    jar = next(home.glob("jars/slf4j-api-*.jar"))  # first on the class path
    linked = jar.readlink()
    jar.unlink()
    shutil.copy(linked, jar)  # reinstalled: the same bytes, a new modification time
    assert _archive_path(env) != where  # so a start from now on goes without it
    refused = _verify(where, env)  # the JVM, told to map it all the same
    assert refused.returncode != 0, refused.stdout[-2000:]
    assert f"A jar file is not the one used while building the shared archive file: {jar}" \
        in refused.stdout + refused.stderr
    # Were it named right all the same (a cause the name misses), the JVM would start
    # without it, silently: the context says so.
    misnamed = Path(_archive_path(env))
    shutil.copy(archive, misnamed)
    misnamed.with_name(misnamed.name + ".size").write_text(str(archive.stat().st_size))
    started = subprocess.run([sys.executable, "-c", STARTED_ANYWAY], env=env,
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert started.stdout.strip().splitlines()[-1] == "5", started.stderr[-2000:]
    assert f"did not map the class-data archive {misnamed}" in started.stderr
    misnamed.unlink()
    misnamed.with_name(misnamed.name + ".size").unlink()
    jar.unlink()
    jar.symlink_to(linked)
    assert _archive_path(env) == where
    assert _verify(where, env).returncode == 0

    with archive.open("r+b") as f:  # gone bad since, its stamp made to agree
        f.truncate(1 << 20)
    stamp.write_text(str(1 << 20))
    started = subprocess.run([sys.executable, "-c", STARTED_ANYWAY], env=env,
                             capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert started.returncode == 0, started.stderr[-2000:]
    assert started.stdout.strip().splitlines()[-1] == "5"
    assert "did not start from the class-data archive" in started.stderr
    assert not archive.exists() and not stamp.exists()  # set aside
