"""Apache Pulsar brokers of versions whose server distribution Maven Central does not serve.

Maven Central serves `org.apache.pulsar:pulsar-broker:4.2.4` but not its
`pulsar-server-distribution`, so that version is assembled from artifacts:
- `lib/`: `pulsar-broker:<v>` and its runtime dependencies, copied by Maven from a throwaway
  pom that IMPORTS `org.apache.pulsar:pulsar:<v>` (the project's parent pom, type pom, scope
  import) in `dependencyManagement`. Without the import Maven's nearest-wins mixes
  OpenTelemetry versions and the broker dies at start with NoSuchMethodError. Group ids are
  prepended to the jar names (with a dot; the distribution's `lib/` has a hyphen, and
  `bin/pulsar` takes `lib/*` either way). `io.prometheus:simpleclient_log4j2` is added: the
  shipped `conf/log4j2.yaml` names its appender.
- `bin/` and `conf/` from the 4.0.8 distribution (tests/harness/apache_pulsar_install.py):
  `bin/pulsar` puts `lib/*` on the class path and runs `PulsarStandaloneStarter`; the harness
  writes its own `standalone.conf` keys over the shipped ones (apache_pulsar.py), each of
  which 4.2.4's `ServiceConfiguration` has too (BookKeeper's keys aside, as on 4.0.8).
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

POM = """<?xml version="1.0" encoding="UTF-8"?>
<project xmlns="http://maven.apache.org/POM/4.0.0">
  <modelVersion>4.0.0</modelVersion>
  <groupId>pulsar-quota-exporter.tests</groupId>
  <artifactId>apache-pulsar-{version}-lib</artifactId>
  <version>0</version>
  <packaging>pom</packaging>
  <dependencyManagement>
    <dependencies>
      <dependency>
        <groupId>org.apache.pulsar</groupId>
        <artifactId>pulsar</artifactId>
        <version>{version}</version>
        <type>pom</type>
        <scope>import</scope>
      </dependency>
    </dependencies>
  </dependencyManagement>
  <dependencies>
    <dependency>
      <groupId>org.apache.pulsar</groupId>
      <artifactId>pulsar-broker</artifactId>
      <version>{version}</version>
    </dependency>
    <dependency>
      <groupId>io.prometheus</groupId>
      <artifactId>simpleclient_log4j2</artifactId>
    </dependency>
  </dependencies>
</project>
"""


def assemble(version: str, target: Path, base: Path, m2: Path, marker: str,
             run: Callable[[list[str]], None]) -> Path:
    """Build `target` (lib/ from Maven, bin/ and conf/ copied from the installed `base`),
    renamed into place whole and with `marker` written last, so a half-built tree is never
    taken for an install."""
    with tempfile.TemporaryDirectory(prefix=".apache-pulsar-", dir=target.parent) as tmp:
        work = Path(tmp)
        (work / "pom.xml").write_text(POM.format(version=version))
        built = work / f"apache-pulsar-{version}"
        run(["mvn", "-B", "-q", "-f", str(work / "pom.xml"), "dependency:copy-dependencies",
             "-Dmdep.prependGroupId=true", "-DincludeScope=runtime",
             f"-DoutputDirectory={built / 'lib'}", f"-Dmaven.repo.local={m2}"])
        broker_jar = built / "lib" / f"org.apache.pulsar.pulsar-broker-{version}.jar"
        if not broker_jar.is_file():
            raise FileNotFoundError(f"Maven copied no {broker_jar.name} into {built / 'lib'}")
        for part in ("bin", "conf"):
            shutil.copytree(base / part, built / part)
        (built / marker).write_text(f"org.apache.pulsar:pulsar-broker:{version} "
                                    f"(bin/, conf/ from {base.name})\n")
        shutil.rmtree(target, ignore_errors=True)
        built.rename(target)
    return target
