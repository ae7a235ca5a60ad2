# The exporter's container image: Debian bookworm, a JRE for Spark's local mode, the package
# in a venv, tini as PID 1. Non-root (uid/gid 65534, as the chart's podSecurityContext) and fit
# for a read-only root filesystem: everything that writes (Python, the JVM, Spark) is pointed
# at /tmp, which the chart mounts as an emptyDir.
#
# The one description of the image's configuration: tests/harness/image_build.py (`image/
# build.sh`, and the image tier of the test command) reads the final stage's ARG, ENV, LABEL,
# USER, WORKDIR, EXPOSE, ENTRYPOINT and CMD lines from here to configure the OCI image it
# packs with umoci, and builds the same root filesystem without a container engine. Keep
# those lines to the forms it reads (exec-form JSON for ENTRYPOINT/CMD, key=value elsewhere).
# Build args: VERSION, REVISION and CREATED label the image; image/build.sh passes them
# (exporter.__version__, the commit, the commit's time), as should `docker build`.
FROM debian:bookworm-slim AS build
COPY image/packages.txt /tmp/packages.txt
RUN apt-get update \
 && grep -v '^#' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md requirements/runtime.lock /src/
COPY exporter /src/exporter
COPY image/prune-venv.sh /src/
# The dependencies at the lock's versions and hashes (what the tests ran), then the package.
RUN python3 -m venv /opt/pulsar-quota-exporter \
 && /opt/pulsar-quota-exporter/bin/pip install --no-cache-dir --require-hashes \
        -r /src/runtime.lock \
 && /opt/pulsar-quota-exporter/bin/pip install --no-cache-dir --no-deps /src \
 && sh /src/prune-venv.sh /opt/pulsar-quota-exporter
# The commit, for `--version` and build_info where there is no checkout (pipeline/buildinfo.py).
ARG REVISION=unknown
RUN /opt/pulsar-quota-exporter/bin/python -c "import exporter, pathlib, sys; \
pathlib.Path(exporter.__file__).with_name('REVISION').write_text(sys.argv[1] + '\n')" "$REVISION"

FROM debian:bookworm-slim
COPY image/packages.txt image/prune.sh /tmp/
RUN apt-get update \
 && grep -v '^#' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends \
 && sh /tmp/prune.sh && rm -f /tmp/packages.txt /tmp/prune.sh
COPY --from=build /opt/pulsar-quota-exporter /opt/pulsar-quota-exporter
ENV PATH=/opt/pulsar-quota-exporter/bin:$PATH \
    HOME=/tmp TMPDIR=/tmp SPARK_LOCAL_DIRS=/tmp \
    PYSPARK_PYTHON=/opt/pulsar-quota-exporter/bin/python \
    XDG_CACHE_HOME=/opt/pulsar-quota-exporter/cache
# Spark's class-data archive for this image's JDK and class path, made once here (it halves
# the JVM's start: exporter/pipeline/spark/jvmarchive.py); read-only at run time.
RUN python -m exporter.pipeline.spark.archivemake && rm -rf /tmp/*
ARG VERSION
ARG REVISION
ARG CREATED
LABEL org.opencontainers.image.title="pulsar-quota-exporter" \
      org.opencontainers.image.description="Prometheus exporter, quota engine and alerting pack for Apache Pulsar backlog quotas and resource groups" \
      org.opencontainers.image.source="https://github.com/pulsar-quota-exporter/pulsar-quota-exporter" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="$VERSION" \
      org.opencontainers.image.revision="$REVISION" \
      org.opencontainers.image.created="$CREATED"
USER 65534:65534
WORKDIR /tmp
EXPOSE 10049
ENTRYPOINT ["/usr/bin/tini", "--", "pulsar-quota-exporter"]
CMD ["run", "--config.file=/etc/pulsar-quota-exporter/config.yaml"]
