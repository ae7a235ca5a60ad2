"""Builds the exporter's OCI image without a container engine (none runs here, nor in CI):
the root filesystem the Dockerfile describes, packed with umoci into an OCI image layout whose
configuration is read from the Dockerfile itself, so the two cannot drift.

Why the Dockerfile is the one source of truth, parsed, rather than a data file both would
read: `docker build` cannot read a data file into ENV/LABEL/ENTRYPOINT, so a data file would
need a second copy in the Dockerfile and a test to keep them equal; reading the final stage's
ARG, ENV, LABEL, USER, WORKDIR, EXPOSE, ENTRYPOINT and CMD lines leaves one copy, and a form
this reader does not know fails the build rather than being guessed at.

The steps, each cached under `.cache/image/` by what goes into it (a second build reuses it):
1. base: Debian bookworm by debootstrap (minbase), `image/packages.txt` installed by apt
   without recommends, then `image/prune.sh` (the Dockerfile runs the same two files);
2. root: a copy of the base plus the package in /opt/pulsar-quota-exporter from wheels built
   here and installed offline (keyed by the package's wheel inputs), `image/prune-venv.sh`
   (the Dockerfile's too), and Spark's class-data
   archive made with the image's own environment, as the Dockerfile's RUN does;
3. pack (every build): `exporter/REVISION`, then `umoci init`, `new`, `insert` of the root as
   one layer and `config` with the Dockerfile's configuration and labels.
`unpack` gives the OCI runtime bundle (config.json and rootfs/) that tests/image/ runs.
Run as root: `image/build.sh` or `python -m tests.harness.image_build [--layout DIR]`.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
PACKAGES = ROOT / "image" / "packages.txt"
PRUNE = ROOT / "image" / "prune.sh"
PRUNE_VENV = ROOT / "image" / "prune-venv.sh"
CACHE = ROOT / ".cache" / "image"
VENV = "/opt/pulsar-quota-exporter"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
TAG = "latest"
# The PATH of debian:bookworm-slim's own configuration, which the Dockerfile's
# `ENV PATH=...:$PATH` extends (an OCI image made by `umoci new` starts with no environment).
BASE_ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
# The package's wheel inputs: what `pip install .` reads (pyproject.toml's readme is README.md).
WHEEL_INPUTS = ("pyproject.toml", "requirements/runtime.lock", "README.md", "exporter")


class DockerfileError(ValueError):
    """A final-stage line this reader does not know how to turn into image configuration."""


@dataclass(frozen=True)
class ImageConfig:
    """The OCI image configuration of the Dockerfile's final stage (image-spec config.md)."""

    user: str
    workdir: str
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    exposed: tuple[str, ...]
    labels: tuple[tuple[str, str], ...]

    def env_dict(self) -> dict[str, str]:
        return dict(self.env)


def _instructions(text: str) -> Iterator[tuple[str, str]]:
    """(INSTRUCTION, rest) of each logical line: comments dropped, `\\` continuations joined."""
    logical = ""
    for line in text.splitlines():
        if not logical and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            logical += line.rstrip()[:-1] + " "
            continue
        logical += line
        word, _, rest = logical.strip().partition(" ")
        yield word.upper(), rest.strip()
        logical = ""


def _expand(value: str, scope: Mapping[str, str]) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(2)
        if name not in scope:
            raise DockerfileError(f"${name} is neither an ENV nor a given ARG")
        return scope[name]
    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, value)


def _pairs(rest: str, scope: Mapping[str, str]) -> list[tuple[str, str]]:
    pairs = []
    for word in shlex.split(rest):
        key, eq, value = word.partition("=")
        if not eq:
            raise DockerfileError(f"not key=value: {word!r} (the legacy `ENV key value` form)")
        pairs.append((key, _expand(value, scope)))
    return pairs


def image_config(dockerfile: str, build_args: Mapping[str, str]) -> ImageConfig:
    """The final stage's configuration, `$VAR`s expanded from its ENVs and ARGs (a given build
    arg, else the ARG's default; one with neither fails: no label is left empty)."""
    stage = dockerfile.split("\nFROM ")[-1]
    scope: dict[str, str] = dict(BASE_ENV)
    env: dict[str, str] = {}
    labels: dict[str, str] = {}
    user, workdir, exposed = "", "/", []
    entrypoint: list[str] = []
    cmd: list[str] = []
    for word, rest in _instructions("FROM " + stage):
        if word == "ARG":
            for spec in shlex.split(rest):
                name, eq, default = spec.partition("=")
                if name in build_args:
                    scope[name] = build_args[name]
                elif eq:
                    scope[name] = default
                else:
                    raise DockerfileError(f"build arg {name} not given and without a default")
        elif word == "ENV":
            for key, value in _pairs(rest, scope):
                env[key] = scope[key] = value
        elif word == "LABEL":
            labels.update(_pairs(rest, scope))
        elif word == "USER":
            user = _expand(rest, scope)
        elif word == "WORKDIR":
            workdir = _expand(rest, scope)
        elif word == "EXPOSE":
            exposed += [p if "/" in p else f"{p}/tcp" for p in rest.split()]
        elif word in ("ENTRYPOINT", "CMD"):
            if not rest.startswith("["):
                raise DockerfileError(f"{word} in shell form: write it as a JSON array")
            (entrypoint if word == "ENTRYPOINT" else cmd)[:] = json.loads(rest)
        elif word not in ("FROM", "COPY", "RUN"):
            raise DockerfileError(f"{word} in the final stage: teach image_config to read it")
    full_env = {**BASE_ENV, **env}
    return ImageConfig(user, workdir, tuple(entrypoint), tuple(cmd), tuple(full_env.items()),
                       tuple(exposed), tuple(sorted(labels.items())))


def build_args() -> dict[str, str]:
    """VERSION, REVISION (the commit, as `--version` abbreviates it) and CREATED (the commit's
    time, not now: the same commit labels the same, as SOURCE_DATE_EPOCH would have it)."""
    from exporter import __version__
    git = ["git", "-C", str(ROOT), "show", "-s", "--abbrev=12", "--format=%h %cI", "HEAD"]
    revision, created = subprocess.run(git, capture_output=True, text=True,
                                       check=True).stdout.split()
    return {"VERSION": __version__, "REVISION": revision, "CREATED": created}


@dataclass
class Build:
    """What a build made and what it cost (seconds per step, bytes)."""

    layout: Path
    config: ImageConfig
    root: Path
    seconds: dict[str, float] = field(default_factory=dict)
    sizes: dict[str, int] = field(default_factory=dict)


def _digest(*paths: Path, extra: str = "") -> str:
    h = hashlib.sha256(extra.encode())
    for path in paths:
        files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
        for f in files:
            if "__pycache__" in f.parts or f.name == "REVISION":
                continue
            h.update(str(f.relative_to(ROOT)).encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _run(argv: list[str], log: Path, **kwargs: object) -> None:
    with log.open("a") as out:
        done = subprocess.run(argv, stdout=out, stderr=subprocess.STDOUT, check=False,
                              **kwargs)  # type: ignore[call-overload]
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-30:])
        raise RuntimeError(f"{shlex.join(argv)} exited {done.returncode}; {log}:\n{tail}")


def _in_root(root: Path, script: str, log: Path, env: Mapping[str, str]) -> None:
    """`script` by sh in a chroot of `root` with /proc and the host's /etc/hosts mounted (as
    a build container has them: Spark resolves the host name), in a mount namespace of its
    own (the mounts go with it), with exactly `env`."""
    setenv = " ".join(shlex.quote(f"{k}={v}") for k, v in env.items())
    (root / "etc" / "hosts").touch()  # a mount point: the runtime provides the file
    quoted = shlex.quote(str(root))
    _run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
          f"mount -t proc proc {quoted}/proc && mount --bind /etc/hosts {quoted}/etc/hosts "
          f"&& exec chroot {quoted} env -i {setenv} sh -c {shlex.quote(script)}"], log)


def _fresh(directory: Path) -> Path:
    """`directory` empty, its stale siblings of the same kind removed (one of each is kept)."""
    kind = directory.name.split("-")[0]
    for old in directory.parent.glob(f"{kind}-*"):
        shutil.rmtree(old)
    directory.mkdir(parents=True)
    return directory


def _step(kind: str, key: str) -> tuple[Path, bool]:
    """A build step's cache directory for `key`, and whether the step completed there (an
    incomplete one is emptied, and the step's stale directories removed)."""
    work = CACHE / f"{kind}-{key}"
    if (work / "complete").exists():
        return work, True
    return _fresh(work), False


def base_root(seconds: dict[str, float]) -> Path:
    """Step 1: debootstrap, the packages, the cuts."""
    key = _digest(PACKAGES, PRUNE, extra=f"{SUITE} {MIRROR}")
    started = time.monotonic()
    work, done = _step("base", key)
    root = work / "root"
    if done:
        return root
    log = work / "build.log"
    _run(["debootstrap", "--variant=minbase", SUITE, str(root), MIRROR], log)
    shutil.copy("/etc/resolv.conf", root / "etc" / "resolv.conf")
    packages = [line.strip() for line in PACKAGES.read_text().splitlines()
                if line.strip() and not line.lstrip().startswith("#")]
    shutil.copy(PRUNE, root / "tmp" / "prune.sh")
    _in_root(root, "apt-get update -qq && apt-get install -y -qq --no-install-recommends "
             + " ".join(packages) + " && apt-get clean && sh /tmp/prune.sh",
             log, {"PATH": BASE_ENV["PATH"], "DEBIAN_FRONTEND": "noninteractive"})
    (root / "tmp" / "prune.sh").unlink()
    (root / "etc" / "resolv.conf").unlink()
    (work / "complete").touch()
    seconds["base"] = time.monotonic() - started
    return root


def image_root(config: ImageConfig, seconds: dict[str, float]) -> Path:
    """Step 2: the base plus the package and Spark's class-data archive."""
    base = base_root(seconds)
    key = _digest(PRUNE_VENV, *(ROOT / p for p in WHEEL_INPUTS), extra=base.parent.name)
    started = time.monotonic()
    work, done = _step("root", key)
    root = work / "root"
    if done:
        return root
    log = work / "build.log"
    _run(["cp", "-a", "--reflink=auto", str(base), str(root)], log)
    wheels = root / "wheels"
    py = str(ROOT / ".venv" / "bin" / "python")
    # The package's wheel, then its dependencies' at the lock's versions and hashes (pyspark
    # is an sdist: built once here, and reused from pip's cache after), installed in the root
    # offline.
    _run([py, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)], log)
    _run([py, "-m", "pip", "wheel", "-q", "--require-hashes", "-r",
          str(ROOT / "requirements" / "runtime.lock"), "-w", str(wheels)], log)
    env = {"PATH": BASE_ENV["PATH"], "HOME": "/root"}
    shutil.copy(PRUNE_VENV, wheels / "prune-venv.sh")
    _in_root(root, f"python3 -m venv {VENV} && {VENV}/bin/pip install -q --no-cache-dir "
             f"--no-index --find-links /wheels pulsar-quota-exporter && "
             f"sh /wheels/prune-venv.sh {VENV}", log, env)
    shutil.rmtree(wheels)
    seconds["package"] = time.monotonic() - started
    started = time.monotonic()
    _in_root(root, "python -m exporter.pipeline.spark.archivemake && rm -rf /tmp/*", log,
             config.env_dict())
    seconds["jvm_archive"] = time.monotonic() - started
    (work / "complete").touch()
    return root


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-sb", "--one-file-system", str(path)], capture_output=True,
                         text=True, check=True).stdout
    return int(out.split()[0])


def revision_file(root: Path) -> Path:
    return next((root / VENV.lstrip("/")).glob("lib/python3*/site-packages/exporter")) / \
        "REVISION"


def build(layout: Path | None = None, args: Mapping[str, str] | None = None) -> Build:
    """The image, as an OCI layout at `layout` (default .cache/image/oci) tagged `latest`."""
    config = image_config(DOCKERFILE.read_text(), args if args is not None else build_args())
    seconds: dict[str, float] = {}
    root = image_root(config, seconds)
    layout = layout or CACHE / "oci"
    started = time.monotonic()
    labels = config.labels
    revision_file(root).write_text(dict(labels)["org.opencontainers.image.revision"] + "\n")
    if layout.exists():
        shutil.rmtree(layout)
    layout.parent.mkdir(parents=True, exist_ok=True)
    log = CACHE / "pack.log"
    log.unlink(missing_ok=True)
    image = f"{layout}:{TAG}"
    _run(["umoci", "init", "--layout", str(layout)], log)
    _run(["umoci", "new", "--image", image], log)
    _run(["umoci", "insert", "--image", image, "--history.created_by",
          "tests/harness/image_build.py", str(root), "/"], log)
    configure = ["umoci", "config", "--image", image, "--config.user", config.user,
                 "--config.workingdir", config.workdir,
                 "--created", dict(labels)["org.opencontainers.image.created"]]
    configure += [a for word in config.entrypoint for a in ("--config.entrypoint", word)]
    configure += [a for word in config.cmd for a in ("--config.cmd", word)]
    configure += [a for k, v in config.env for a in ("--config.env", f"{k}={v}")]
    configure += [a for port in config.exposed for a in ("--config.exposedports", port)]
    configure += [a for k, v in labels for a in ("--config.label", f"{k}={v}")]
    configure += [a for k, v in labels for a in ("--manifest.annotation", f"{k}={v}")]
    _run(configure, log)
    _run(["umoci", "gc", "--layout", str(layout)], log)
    seconds["pack"] = time.monotonic() - started
    built = Build(layout, config, root, seconds)
    built.sizes["root"] = _du(root)
    built.sizes["layers"] = sum(layer["size"] for layer in manifest(layout)["layers"])
    return built


def blob(layout: Path, digest: str) -> dict:
    return json.loads((layout / "blobs" / digest.replace(":", "/")).read_text())


def manifest(layout: Path) -> dict:
    index = json.loads((layout / "index.json").read_text())
    return blob(layout, index["manifests"][0]["digest"])


def oci_config(layout: Path) -> dict:
    """The image's configuration blob (image-spec config.md: config.Entrypoint, Cmd, Env...)."""
    return blob(layout, manifest(layout)["config"]["digest"])


def unpack(layout: Path, bundle: Path) -> float:
    """`umoci unpack` into `bundle` (config.json and rootfs/); the seconds it took."""
    if bundle.exists():
        shutil.rmtree(bundle)
    started = time.monotonic()
    subprocess.run(["umoci", "unpack", "--image", f"{layout}:{TAG}", str(bundle)],
                   check=True, capture_output=True)
    return time.monotonic() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layout", type=Path, help="where the OCI layout goes "
                        "(default .cache/image/oci)")
    parser.add_argument("--unpack", type=Path, metavar="BUNDLE",
                        help="also unpack it into this OCI runtime bundle")
    opts = parser.parse_args()
    started = time.monotonic()
    built = build(opts.layout)
    if opts.unpack:
        built.seconds["unpack"] = unpack(built.layout, opts.unpack)
        built.sizes["bundle"] = _du(opts.unpack / "rootfs")
    built.seconds["total"] = time.monotonic() - started
    print(f"image: {built.layout}:{TAG}")
    print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in built.seconds.items()))
    print("bytes: " + ", ".join(f"{k} {v / 1e6:.0f} MB" for k, v in built.sizes.items()))


if __name__ == "__main__":
    main()
