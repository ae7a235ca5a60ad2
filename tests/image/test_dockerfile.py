"""The reader of the Dockerfile's final stage (tests/harness/image_build.py): the image's
configuration is written once, there, so a form it cannot read must fail the build rather
than leave a setting out of the OCI image."""

from __future__ import annotations

import pytest

from tests.harness.image_build import DockerfileError, image_config

STAGE = """FROM debian AS build
ENV IGNORED=build-stage
FROM debian:bookworm-slim
ARG REVISION
ARG VERSION=0.0.0
ENV PATH=/venv/bin:$PATH \\
    HOME=/tmp
# a comment between instructions
LABEL a.b="two words" rev=${REVISION}
USER 65534:65534
EXPOSE 10049 9000/udp
ENTRYPOINT ["/usr/bin/tini", "--", "x"]
CMD ["run"]
"""


def test_reads_the_final_stage_with_its_args_and_the_base_path() -> None:
    config = image_config(STAGE, {"REVISION": "abc"})
    env = config.env_dict()
    assert env["PATH"].startswith("/venv/bin:/usr/local/sbin:") and env["HOME"] == "/tmp"
    assert "IGNORED" not in env  # the build stage's
    assert dict(config.labels) == {"a.b": "two words", "rev": "abc"}
    assert (config.user, config.workdir) == ("65534:65534", "/")
    assert config.exposed == ("10049/tcp", "9000/udp")
    assert (config.entrypoint, config.cmd) == (("/usr/bin/tini", "--", "x"), ("run",))


@pytest.mark.parametrize("line", [
    'CMD run --config.file=x',  # shell form: Docker would wrap it in /bin/sh -c
    "ENV HOME /tmp",  # the legacy form
    "HEALTHCHECK CMD true",  # an instruction the packer does not carry
    "LABEL unknown=$NOT_DECLARED",
])
def test_refuses_what_it_cannot_carry(line: str) -> None:
    with pytest.raises(DockerfileError):
        image_config(STAGE + line + "\n", {"REVISION": "abc"})


def test_an_arg_without_a_value_fails() -> None:
    with pytest.raises(DockerfileError, match="REVISION"):
        image_config(STAGE, {})
