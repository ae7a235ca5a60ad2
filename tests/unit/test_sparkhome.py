"""The Spark install a local JVM starts from (pipeline/spark/sparkhome.py): links to PySpark's,
without the jars of Spark's other modules, and never without one Spark Core needs."""

import os
import re
import zipfile
from pathlib import Path
from xml.etree import ElementTree

import pytest

from exporter.pipeline.spark import sparkhome

POM = "{http://maven.apache.org/POM/4.0.0}"


def _full_install(at: Path, jars: list[str]) -> Path:
    (at / "bin").mkdir(parents=True)
    (at / "bin" / "spark-submit").write_text("#!/bin/sh\n")
    (at / "__init__.py").write_text("")
    (at / "jars").mkdir()
    for name in jars:
        (at / "jars" / name).write_bytes(name.encode())
    return at


def test_every_entry_is_linked_but_the_jars_of_other_modules(tmp_path):
    full = _full_install(tmp_path / "pyspark", [
        "spark-core_2.13-4.3.0.jar", "spark-sql_2.13-4.3.0.jar", "spark-sql-api_2.13-4.3.0.jar",
        "spark-unsafe_2.13-4.3.0.jar", "hive-exec-2.3.10-core.jar", "icu4j-78.3.jar",
        "kubernetes-model-core-7.6.1.jar", "scala-library-2.13.18.jar", "ivy-2.5.3.jar"])
    home = sparkhome.core_home(tmp_path / "cache", full)
    assert home.parent == tmp_path / "cache"
    assert home.stat().st_mode & 0o777 == 0o755  # an image's user reads what root made
    assert sorted(p.name for p in home.iterdir()) == ["__init__.py", "bin", "jars"]
    assert (home / "bin").readlink() == full / "bin"
    assert sorted(p.name for p in (home / "jars").iterdir()) == [
        "icu4j-78.3.jar", "ivy-2.5.3.jar", "scala-library-2.13.18.jar",
        "spark-core_2.13-4.3.0.jar", "spark-unsafe_2.13-4.3.0.jar"]
    assert (home / "jars" / "ivy-2.5.3.jar").read_bytes() == b"ivy-2.5.3.jar"


def test_the_links_are_made_once_and_again_when_the_install_changes(tmp_path):
    full = _full_install(tmp_path / "pyspark", ["spark-core_2.13-4.3.0.jar"])
    home = sparkhome.core_home(tmp_path / "cache", full)
    made = home.stat().st_ino
    assert sparkhome.core_home(tmp_path / "cache", full) == home
    assert home.stat().st_ino == made  # reused, not made again
    (full / "jars" / "spark-new-thing_2.13-4.4.0.jar").write_bytes(b"new")  # an upgrade adds one
    again = sparkhome.core_home(tmp_path / "cache", full)
    assert again == home  # the same name: archives made for it are pruned as replaced
    assert (again / "jars" / "spark-new-thing_2.13-4.4.0.jar").is_symlink()
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [home.name]  # no leftovers
    other = _full_install(tmp_path / "other-venv", ["spark-core_2.13-4.3.0.jar"])
    assert sparkhome.core_home(tmp_path / "cache", other) != home  # one per install


def test_an_operators_spark_home_is_used_as_it_is(tmp_path, monkeypatch):
    full = _full_install(tmp_path / "spark", ["spark-sql_2.13-4.3.0.jar"])
    monkeypatch.setenv("SPARK_HOME", str(full))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert sparkhome.local_home() == full
    assert not (tmp_path / "cache").exists()


def test_a_cache_that_cannot_be_written_leaves_pysparks_install(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    (tmp_path / "cache").write_text("a file where the cache directory would be")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert sparkhome.local_home() == sparkhome.pyspark_home()


def test_spark_home_is_set_only_while_the_jvm_is_launched(tmp_path, monkeypatch):
    monkeypatch.delenv("SPARK_HOME", raising=False)
    with sparkhome.launching_from(tmp_path):
        assert os.environ["SPARK_HOME"] == str(tmp_path)
    assert "SPARK_HOME" not in os.environ
    monkeypatch.setenv("SPARK_HOME", "/opt/spark")
    with pytest.raises(RuntimeError), sparkhome.launching_from(tmp_path):
        raise RuntimeError("the JVM did not start")
    assert os.environ["SPARK_HOME"] == "/opt/spark"
    with sparkhome.launching_from(None):  # a cluster master's driver: as it is
        assert os.environ["SPARK_HOME"] == "/opt/spark"


def _maven_dependencies(jars: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """From the POMs inside the installed jars: artifact → its runtime dependencies, and
    artifact → the jars holding its POM (Scala suffixes dropped)."""
    def bare(artifact: str) -> str:
        return re.sub(r"_(\$\{scala\.binary\.version\}|2\.1[23])$", "", artifact)

    needs: dict[str, set[str]] = {}
    held: dict[str, set[str]] = {}
    for jar in jars.glob("*.jar"):
        with zipfile.ZipFile(jar) as z:
            for name in z.namelist():
                if not (name.startswith("META-INF/maven/") and name.endswith("/pom.xml")):
                    continue
                root = ElementTree.fromstring(z.read(name))
                artifact = bare(root.findtext(f"{POM}artifactId") or "")
                held.setdefault(artifact, set()).add(jar.name)
                for dep in root.iter(f"{POM}dependency"):
                    if dep.findtext(f"{POM}scope") in ("test", "provided", "system") or \
                            (dep.findtext(f"{POM}optional") or "").strip() == "true":
                        continue
                    needs.setdefault(artifact, set()).add(bare(dep.findtext(f"{POM}artifactId")
                                                               or ""))
    return needs, held


def test_no_jar_spark_core_depends_on_is_left_out():
    """Spark Core's runtime dependencies, by the POMs its jars carry, each in a kept jar.
    (POM-less jars, such as Ivy's, are not seen here: they are kept because no pattern
    names them. Before ICU4J and spark-variant were kept, this failed: spark-unsafe
    depends on both.)"""
    jars = sparkhome.pyspark_home() / "jars"
    needs, held = _maven_dependencies(jars)
    closure, todo = set(), ["spark-core"]
    while todo:
        artifact = todo.pop()
        if artifact not in closure:
            closure.add(artifact)
            todo += needs.get(artifact, ())
    assert len(closure) > 50 and "spark-core" in held  # the POMs were read
    # An artifact is there when one jar holding its POM is kept (a shaded copy's jar, such
    # as spark-connect's copy of Gson, may well be left out).
    missing = sorted(artifact for artifact in closure if held.get(artifact)
                     and all(sparkhome.OTHER_MODULES.match(jar) for jar in held[artifact]))
    assert missing == []
