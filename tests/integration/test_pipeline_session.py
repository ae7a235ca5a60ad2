"""The SparkContext's configuration: loopback-bound locally, operator overrides win."""

import os
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pyarrow as pa
import pytest

from exporter.config.settings import Spark
from exporter.pipeline.spark import jvmarchive, sparkhome
from exporter.pipeline.spark.session import (
    FINISHED_KEPT,
    JVM_OPTIONS,
    get_context,
    keeping_sigint_handler,
    local_cores,
    package_zip,
    session_conf,
)
from tests.harness.wait import poll


def test_local_masters_are_bound_to_loopback_and_run_this_python():
    conf = session_conf(Spark(master="local[3]"))
    assert conf["spark.master"] == "local[3]"
    assert conf["spark.driver.host"] == "127.0.0.1"
    assert conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.ui.enabled"] == "false"
    assert conf["spark.pyspark.python"] == sys.executable
    assert conf["spark.python.worker.reuse"] == "true"  # imports stay warm between cycles


def test_cluster_masters_are_not_bound_to_loopback():
    # Executors elsewhere must reach the driver: binding it to 127.0.0.1 would cut them off.
    conf = session_conf(Spark(master="spark://spark-master:7077"))
    assert "spark.driver.host" not in conf
    assert "spark.driver.bindAddress" not in conf
    assert "spark.pyspark.python" not in conf  # the executors' own Python


def test_config_conf_overrides_defaults():
    conf = session_conf(Spark(master="local[2]", conf={
        "spark.python.worker.reuse": "false",
        "spark.driver.memory": "4g",
    }))
    assert conf["spark.python.worker.reuse"] == "false"
    assert conf["spark.driver.memory"] == "4g"


def test_the_package_zip_for_cluster_executors_holds_the_task_code():
    with zipfile.ZipFile(package_zip()) as archive:
        names = set(archive.namelist())
    assert {"exporter/__init__.py", "exporter/pipeline/scrape.py",
            "exporter/pipeline/parse.py", "exporter/sources/brokers.py"} <= names


def test_local_cores():
    assert local_cores("local") == 1
    assert local_cores("local[4]") == 4
    assert local_cores("local[4,2]") == 4
    assert local_cores("local[*]") == len(os.sched_getaffinity(0))  # no quota here
    assert local_cores("k8s://https://api:6443") is None
    assert local_cores("spark://host:7077") is None


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_one_context_per_process_reused_whatever_the_later_config():
    first = get_context(Spark(master="local[2]"))
    again = get_context(Spark(master="local[1]", conf={"spark.app.name": "other"}))
    assert again is first
    assert first.getConf().get("spark.driver.host") == "127.0.0.1"
    assert first.getConf().get("spark.ui.enabled") == "false"
    assert first.parallelize(range(3), 2).count() == 3


def _in_a_worker(fn) -> object:
    """`fn()` run in one of the running context's Python workers."""
    context = get_context(Spark(master="local[2]"))
    return context.parallelize([0], 1).map(lambda _: fn()).first()


def test_local_masters_run_python_workers_on_this_interpreter():
    # A venv's python, not whatever `python3` comes first on PATH.
    for master in ("local", "local[2]", "local[*]"):
        conf = session_conf(Spark(master=master))
        assert conf["spark.pyspark.python"] == sys.executable
        assert conf["spark.pyspark.driver.python"] == sys.executable
    cluster = session_conf(Spark(master="spark://spark-master:7077"))
    assert "spark.pyspark.python" not in cluster
    assert "spark.pyspark.driver.python" not in cluster
    chosen = session_conf(Spark(master="local[2]", conf={"spark.pyspark.python": "/opt/py"}))
    assert chosen["spark.pyspark.python"] == "/opt/py"


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_the_running_context_uses_this_interpreter_for_its_workers():
    # The one context of this test process (started here or by another module's get_context).
    context = get_context(Spark(master="local[2]"))
    assert context.getConf().get("spark.pyspark.python") == sys.executable
    assert _in_a_worker(lambda: sys.executable) == sys.executable


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_local_workers_import_the_installed_pyspark_not_its_zip():
    context = get_context(Spark(master="local[2]"))
    assert context.getConf().get("spark.python.daemon.module") == "exporter.pipeline.spark.daemon"
    import pyspark

    seen = _in_a_worker(lambda: __import__("pyspark").__file__)
    assert seen == pyspark.__file__ and ".zip" not in seen


def test_the_exporter_takes_arrows_buffers_from_malloc_unless_told_otherwise():
    """mimalloc, Arrow's default pool, commits an arena in each process that allocates and
    keeps what it freed: importing the package (exporter/__init__.py) sets the system pool
    before pyarrow loads; an operator's own choice stands."""
    probe = ("import exporter.cli, pyarrow as pa; "
             "print(pa.default_memory_pool().backend_name)")
    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    for chosen, expected in ((None, "system"), ("mimalloc", "mimalloc")):
        run_env = env if chosen is None else {**env, "ARROW_DEFAULT_MEMORY_POOL": chosen}
        out = subprocess.run([sys.executable, "-c", probe], env=run_env, check=True,
                             capture_output=True, text=True).stdout.strip()
        assert out == expected


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_local_workers_take_arrows_buffers_from_malloc():
    assert _in_a_worker(lambda: pa.default_memory_pool().backend_name) == "system"


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_local_workers_run_arrow_tasks_without_pandas():
    """pyarrow would import pandas (~30 MB a worker) on its first `pa.array`, where it is
    installed: the exporter does not depend on it, but an operator's Python may hold it.
    The workers refuse it themselves (daemon.py, importblocker.py), installed or not."""
    def task() -> tuple[str, int]:
        made = pa.array([1, 2])  # what imports pandas when it can
        try:
            import pandas  # noqa: F401
            found = "imported"
        except ImportError as exc:
            found = str(exc)
        return found, len(made)

    assert _in_a_worker(task) == (
        "No module named 'pandas' in the exporter's processes (exporter/importblocker.py)", 2)


def test_local_driver_jvm_flags_and_the_class_archive_when_there_is_one(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    options = session_conf(Spark(master="local[2]"))["spark.driver.extraJavaOptions"]
    assert options == JVM_OPTIONS and "-Xms32m" in options  # no archive yet
    archive = jvmarchive.archive_path()
    assert archive.parent == tmp_path / "pulsar-quota-exporter"
    archive.parent.mkdir(exist_ok=True)  # holding the Spark install's links already
    archive.write_bytes(b"made")
    assert session_conf(Spark(master="local[2]"))["spark.driver.extraJavaOptions"] == \
        JVM_OPTIONS  # not verified: no size stamp
    archive.with_name(archive.name + ".size").write_text("4")
    options = session_conf(Spark(master="local[2]"))["spark.driver.extraJavaOptions"]
    assert options == f"{JVM_OPTIONS} -XX:SharedArchiveFile={archive} -Xlog:cds=off " \
                      "-Xlog:cds+dynamic=off"
    assert "spark.driver.extraJavaOptions" not in session_conf(Spark(master="spark://m:7077"))
    mine = session_conf(Spark(master="local[2]", conf={"spark.driver.extraJavaOptions": "-X"}))
    assert mine["spark.driver.extraJavaOptions"] == "-X"  # the operator's, whole


def test_the_archive_is_named_for_the_jars_the_jvm_checks_it_against(tmp_path, monkeypatch):
    """A JVM ignores an archive made from other jars (another size or modification time),
    silently: reinstalling the same PySpark into the same venv must name another archive.
    (tests/integration/test_spark_class_archive.py shows the JVM refusing one.)"""
    jars = tmp_path / "spark" / "jars"
    jars.mkdir(parents=True)
    monkeypatch.setenv("SPARK_HOME", str(jars.parent))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    core, api = jars / "spark-core.jar", jars / "slf4j-api.jar"
    core.write_bytes(b"core")
    api.write_bytes(b"api")
    first = jvmarchive.archive_path()
    assert first.parent == tmp_path / "pulsar-quota-exporter"
    assert jvmarchive.archive_path() == first
    was = api.stat().st_mtime_ns
    os.utime(api, ns=(was + 10**9, was + 10**9))  # the same bytes, installed again
    assert jvmarchive.archive_path() != first
    os.utime(api, ns=(was, was))
    assert jvmarchive.archive_path() == first
    (jars / "README").write_text("not on the class path")
    assert jvmarchive.archive_path() == first
    (jars / "spark-extra.jar").write_bytes(b"extra")
    assert jvmarchive.archive_path() != first


def test_archives_of_other_jdks_unused_for_30_days_go_when_one_is_made(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(jvmarchive, "KEPT", 10)  # the count's own test is below
    current = jvmarchive.archive_path()
    current.parent.mkdir(exist_ok=True)  # holding the Spark install's links already
    now = time.time()
    day = 86400

    here = jvmarchive._spark_home()  # the links to PySpark's (sparkhome.py)

    def archive(name: str, stamped_days_ago: float | None, made_days_ago: float,
                home: str | None = None) -> Path:
        path = current.with_name(name)
        path.write_bytes(b"jsa")
        os.utime(path, (now - made_days_ago * day,) * 2)
        if stamped_days_ago is not None:
            stamp = path.with_name(path.name + ".size")
            stamp.write_text("3" if home is None else f"3\n{home}\n")
            os.utime(stamp, (now - stamped_days_ago * day,) * 2)
        return path

    current.write_bytes(b"jsa")
    old = archive("spark-4.0.0-aaaaaaaaaaaa.jsa", 31, 200)  # an upgrade ago
    shared = archive("spark-4.3.0-bbbbbbbbbbbb.jsa", 2, 200)  # another venv still starting
    unverified = archive("spark-4.3.0-cccccccccccc.jsa", None, 40)
    fresh_unverified = archive("spark-4.3.0-dddddddddddd.jsa", None, 1)
    # this very install, used yesterday, before PySpark was installed again into it
    replaced = archive("spark-4.3.0-eeeeeeeeeeee.jsa", 1, 3, home=here)
    elsewhere = archive("spark-4.3.0-ffffffffffff.jsa", 1, 3, home="/opt/other/pyspark")
    (current.parent / "notes.txt").write_text("not an archive")
    assert sorted(jvmarchive.prune(current, now)) == sorted([old, unverified, replaced])
    left = sorted(p.name for p in current.parent.iterdir() if p.is_file())
    assert left == sorted([current.name, shared.name, shared.name + ".size",
                           elsewhere.name, elsewhere.name + ".size",
                           fresh_unverified.name, "notes.txt"])
    assert jvmarchive.usable(elsewhere)  # the size is the stamp's first line

    stamp = current.with_name(current.name + ".size")
    stamp.write_text("3")
    os.utime(stamp, (now - 40 * day,) * 2)
    jvmarchive.used(current)  # a start from it: it counts as used now
    assert stamp.stat().st_mtime >= now - 1


def test_beyond_a_few_archives_the_least_recently_used_go(tmp_path, monkeypatch):
    """Each fresh clone's venv is a Spark install of its own: a machine that clones for CI
    gathered 23 archives (3.4 GB) within the 30 days."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    current = jvmarchive.archive_path()
    current.parent.mkdir(exist_ok=True)  # holding the Spark install's links already
    current.write_bytes(b"jsa")
    now = time.time()
    others = []
    for days in (3, 1, 9, 2, 5):  # each a clone's, its last start `days` ago
        path = current.with_name(f"spark-4.3.0-{days:012d}.jsa")
        path.write_bytes(b"jsa")
        stamp = path.with_name(path.name + ".size")
        stamp.write_text(f"3\n/tmp/clone-{days}/.venv/lib/pyspark\n")
        os.utime(stamp, (now - days * 86400,) * 2)
        os.utime(path, (now - 20 * 86400,) * 2)  # made long ago: the stamp says when used
        others.append(path)
    gone = jvmarchive.prune(current, now)
    assert sorted(p.name for p in gone) == sorted(
        f"spark-4.3.0-{d:012d}.jsa" for d in (3, 9, 5))
    assert sorted(p.name for p in current.parent.glob("*.jsa")) == sorted(
        [current.name] + [f"spark-4.3.0-{d:012d}.jsa" for d in (1, 2)])
    assert not any(current.parent.glob("*000000000009.jsa.size"))  # stamps go with them
    assert jvmarchive.KEPT == 3


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_starting_the_session_leaves_the_sigint_handler_alone():
    get_context(Spark(master="local[2]"))
    handler = signal.getsignal(signal.SIGINT)
    assert not getattr(handler, "__module__", "").startswith("pyspark"), handler


def test_keeping_sigint_handler_puts_the_previous_handler_back():
    def mine(*_):
        pass

    def intruder(*_):
        pass

    original = signal.signal(signal.SIGINT, mine)
    try:
        with keeping_sigint_handler():
            signal.signal(signal.SIGINT, intruder)
            assert signal.getsignal(signal.SIGINT) is intruder
        assert signal.getsignal(signal.SIGINT) is mine
    finally:
        signal.signal(signal.SIGINT, original)


# A Spark worker's heap after a task that fragments it, untrimmed and trimmed: run in a
# process of its own, since glibc's thresholds are the process's (the exporter's
# collections fix the mmap threshold from `start`: a test that starts them in this process
# would leave the large blocks below mapped apart, and nothing in the heap to hand back).
_FRAGMENTED = """
from pathlib import Path

from exporter.pipeline.spark.daemon import trimmed


def heap_resident_kb():
    lines = Path("/proc/self/smaps").read_text().splitlines()
    start = next(n for n, line in enumerate(lines) if line.endswith("[heap]"))
    return next(int(line.split()[1]) for line in lines[start + 1:] if line.startswith("Rss:"))


kept = []
large = bytearray(16 << 20)
del large  # glibc now takes chunks below 16 MiB from the heap
chunks = [bytearray(1 << 20) for _ in range(24)]
kept.append(bytearray(300 << 10))  # long-lived, above them
del chunks
untrimmed = heap_resident_kb()
trimmed(lambda infile, outfile: None)(None, None)
print(untrimmed, heap_resident_kb())
"""


def test_a_task_hands_the_heaps_free_pages_back_to_the_os():
    """What made Spark's workers step up for good: freed megabytes below a live chunk, which
    glibc keeps (daemon.py). `trimmed` returns them after each task."""
    done = subprocess.run([sys.executable, "-c", _FRAGMENTED], capture_output=True,
                          text=True, check=True, timeout=120)
    untrimmed, after = map(int, done.stdout.split())
    assert untrimmed - after >= 16 << 10, (untrimmed, after)


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_local_workers_trim_after_each_task():
    seen = _in_a_worker(lambda: __import__("pyspark.worker").worker.main.__qualname__)
    assert seen == "trimmed.<locals>.task"


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_the_driver_keeps_only_a_few_finished_jobs():
    """Spark's defaults keep 1,000 of each: the driver's heap would grow for 1,000 cycles."""
    context = get_context(Spark(master="local[2]"))
    for _ in range(FINISHED_KEPT + 15):
        context.parallelize(range(2), 2).collect()  # one job, as a cycle runs
    tracker = context.statusTracker()

    poll(lambda: len(tracker.getJobIdsForGroup(None)), "the status store trimmed", 30, 0.2,
         until=lambda n: n <= FINISHED_KEPT)  # it forgets on a thread of its own


@pytest.mark.spark  # starts this process's SparkContext (a JVM)
def test_the_local_jvm_starts_from_spark_cores_jars_only():
    """The jars of Spark's other modules are not on its class path (sparkhome.py): an open
    jar's directory stays on the JVM's heap, 17 MB for all 279."""
    context = get_context(Spark(master="local[2]"))
    path = context._jvm.System.getProperty("java.class.path").split(os.pathsep)
    jars = {Path(p).name for p in path if p.endswith(".jar")}
    assert {j for j in jars if j.startswith(("spark-core_", "spark-network-common_", "py4j-"))}
    assert not {j for j in jars if j.startswith(("spark-sql_", "spark-catalyst_", "hive-"))}
    everything = {p.name for p in (sparkhome.pyspark_home() / "jars").glob("*.jar")}
    assert jars < everything
    assert all(p.startswith(str(sparkhome.local_home())) for p in path if p.endswith(".jar"))
