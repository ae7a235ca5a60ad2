# The exporter's container image: Debian bookworm, a JRE for Spark's local mode, the package
# in a venv. Non-root (uid/gid 65534, as the chart's podSecurityContext) and fit for a
# read-only root filesystem: everything that writes (Python, the JVM, Spark) is pointed at
# /tmp, which the chart mounts as an emptyDir. image/rootfs.sh builds the same root
# filesystem without a container engine and runs the exporter from it.
FROM debian:bookworm-slim AS build
COPY image/packages.txt /tmp/packages.txt
RUN apt-get update \
 && grep -v '^#' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/*
COPY pyproject.toml README.md constraints.txt /src/
COPY exporter /src/exporter
RUN python3 -m venv /opt/pulsar-quota-exporter \
 && /opt/pulsar-quota-exporter/bin/pip install --no-cache-dir -c /src/constraints.txt /src

FROM debian:bookworm-slim
COPY image/packages.txt /tmp/packages.txt
RUN apt-get update \
 && grep -v '^#' /tmp/packages.txt | xargs apt-get install -y --no-install-recommends \
 && rm -rf /var/lib/apt/lists/* /tmp/packages.txt
COPY --from=build /opt/pulsar-quota-exporter /opt/pulsar-quota-exporter
ENV PATH=/opt/pulsar-quota-exporter/bin:$PATH \
    HOME=/tmp TMPDIR=/tmp SPARK_LOCAL_DIRS=/tmp \
    PYSPARK_PYTHON=/opt/pulsar-quota-exporter/bin/python \
    XDG_CACHE_HOME=/opt/pulsar-quota-exporter/cache
# Spark's class-data archive for this image's JDK and class path, made once here (it halves
# the JVM's start: exporter/pipeline/jvmarchive.py); read-only at run time.
RUN path=$(python -c "from exporter.pipeline.jvmarchive import archive_path; print(archive_path())") \
 && mkdir -p "$(dirname "$path")" && python -m exporter.pipeline.jvmarchive "$path" \
 && rm -rf /tmp/* && test -s "$path"
USER 65534:65534
EXPOSE 10049
ENTRYPOINT ["pulsar-quota-exporter"]
CMD ["run", "--config.file=/etc/pulsar-quota-exporter/config.yaml"]
