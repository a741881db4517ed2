#!/usr/bin/env python3
"""Builds Ferry's Docker images without any registry (`make images`).

1. A base image with CPython 3.11: by default `ferry-base:bookworm`, made here from Debian
   packages (debootstrap + `docker import`), since no image can be pulled on Ferry's machines;
   `--base python:3.11-slim` (or FERRY_BASE_IMAGE) uses a registry image instead.
2. The wheels, prepared on the host: `uv build` for Ferry's packages, `pip download` for the
   locked third-party dependencies (cached under deploy/.cache, keyed by the lock).
3. `docker build` of deploy/Dockerfile with those wheels (`pip install --no-index` inside).

Nothing is rebuilt when nothing changed: each image carries a label with the hash of its
inputs (the base recipe; the base, the wheels and every file copied into the image), compared
before building. `--offline` builds only from what is already here (the e2e tests use it).
Standard library only.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO

DEPLOY = Path(__file__).resolve().parent
ROOT = DEPLOY.parent
CACHE = DEPLOY / ".cache"

IMAGE = "ferry:latest"
LOCAL_BASE = "ferry-base:bookworm"
REGISTRY_BASE = "python:3.11-slim"
KEY_LABEL = "ferry.build-key"
BASE_LABEL = "ferry.base-recipe"
# What runs in containers: every service and the SDK/CLI. Not ferry-spark: Spark jobs run on a
# Spark cluster, and pyspark ships no wheel (pip download --only-binary cannot fetch it).
IMAGE_PACKAGES = (
    "ferry-protocol",
    "ferry-native",
    "ferry-runtime",
    "ferry-namesrv",
    "ferry-broker-store",
    "ferry-broker-remoting",
    "ferry-index",
    "ferry-scheduler",
    "ferry-ha-replicator",
    "ferry-console",
    "ferry-controller",
    "ferry-proxy",
    "ferry",
)

DEBIAN_SUITE = "bookworm"  # its python3 is CPython 3.11, which the wheels target
# etcd-server (etcd 3.4): the controller's store, run as its own container (compose `ha`)
DEBIAN_PACKAGES = "python3,python3-venv,etcd-server"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
# Emptied in the base rootfs (each package's copyright file is kept): no container reads them.
TRIM = ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/man", "usr/share/info",
        "usr/share/locale", "usr/share/doc")  # fmt: skip
# Files copied into the image besides the wheels.
CONTEXT_FILES = ("Dockerfile", "healthcheck.py", "broker.conf")
PYTHON_VERSION = "3.11"
ENGINE_ARCHS = {"amd64": "x86_64", "arm64": "aarch64"}
# pip takes platform tags literally, so list every glibc the base (2.36) can load, newest first.
GLIBC_MINORS = range(36, 16, -1)


class BuildError(Exception):
    pass


def log(message: str) -> None:
    print(f"build_images: {message}", flush=True)


def run(
    args: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    stdin: IO[bytes] | None = None,
    quiet: bool = False,
) -> None:
    """Runs a command; BuildError if it fails. A quiet command's output is shown only then."""
    out = subprocess.PIPE if quiet else None
    done = subprocess.run(list(args), env=env, stdin=stdin, stdout=out, stderr=out, check=False)
    if done.returncode != 0:
        if quiet:
            sys.stdout.write(done.stdout.decode(errors="replace")[-4000:])
            sys.stdout.write(done.stderr.decode(errors="replace")[-4000:])
        raise BuildError(f"`{' '.join(args[:4])} …` failed with exit code {done.returncode}")


def probe(args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=False)


def output(args: Sequence[str]) -> str:
    """A command's stdout; BuildError (with its stderr) if it fails."""
    done = probe(args)
    if done.returncode != 0:
        raise BuildError(f"`{' '.join(args[:4])} …` failed: {done.stderr.strip()}")
    return done.stdout.strip()


def python_tool(module: str) -> list[str]:
    """How to run uv or pip: on PATH (uv) or from this interpreter if it has it, else python3's
    (the Makefile installs uv into python3)."""
    if module == "uv" and shutil.which("uv"):
        return ["uv"]
    if importlib.util.find_spec(module) is not None:
        return [sys.executable, "-m", module]
    return ["python3", "-m", module]


# ---- docker ---------------------------------------------------------------------------------


def docker_answers() -> str:
    """'' when a Docker engine answers, else why not."""
    if shutil.which("docker") is None:
        return "the docker command is not installed"
    done = probe(["docker", "version", "--format", "{{.Server.Version}}"])
    if done.returncode != 0 or not done.stdout.strip():
        last = (done.stderr.strip().splitlines() or ["no answer"])[-1]
        return f"no Docker engine answers ({last})"
    return ""


def start_engine(wait_s: float = 90) -> str:
    """Starts the Docker daemon when it is installed but not running and we may (root): a
    daemon that died (or a machine whose session processes, a hand-started daemon among them,
    were ended) would otherwise fail the Docker tier. '' once it answers, else why not."""
    dockerd = shutil.which("dockerd")
    if dockerd is None or os.geteuid() != 0:
        return "no dockerd to start (or not root)"
    log_path = Path("/var/log/dockerd.log")
    with log_path.open("ab") as out:
        subprocess.Popen(  # detached: the engine outlives this script and the test run
            [dockerd], stdout=out, stderr=out, stdin=subprocess.DEVNULL, start_new_session=True
        )
    deadline = time.monotonic() + wait_s
    problem = docker_answers()
    while problem and time.monotonic() < deadline:
        time.sleep(1)  # polling the engine's answer, with a deadline
        problem = docker_answers()
    return f"{problem} after starting dockerd (see {log_path})" if problem else ""


def inspect(image: str, template: str) -> str | None:
    """A field of a local image, None if the image is not here."""
    done = probe(["docker", "image", "inspect", "--format", template, image])
    return done.stdout.strip() if done.returncode == 0 else None


def image_label(image: str, label: str) -> str | None:
    return inspect(image, f'{{{{index .Config.Labels "{label}"}}}}')


def image_size_mb(image: str) -> float:
    return int(inspect(image, "{{.Size}}") or 0) / 1e6


def docker_build_env() -> dict[str, str]:
    env = dict(os.environ)
    # Without buildx the CLI falls back to the legacy builder anyway; saying so skips a notice.
    if probe(["docker", "buildx", "version"]).returncode != 0:
        env["DOCKER_BUILDKIT"] = "0"
    return env


# ---- the base image -------------------------------------------------------------------------


def base_recipe_key() -> str:
    recipe = f"{DEBIAN_SUITE}|{DEBIAN_PACKAGES}|minbase|{','.join(TRIM)}|LANG=C.UTF-8"
    return hashlib.sha256(recipe.encode()).hexdigest()[:16]


def ensure_debootstrap() -> None:
    if shutil.which("debootstrap"):
        return
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise BuildError(
            "making the local base needs debootstrap (as root on Debian or Ubuntu); "
            f"elsewhere pass --base {REGISTRY_BASE}"
        )
    log("installing debootstrap (apt-get)")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", "debootstrap"]
    if subprocess.run(install, env=env, check=False).returncode != 0:
        run(["apt-get", "update", "-q"], env=env)
        run(install, env=env)


def make_local_base(mirror: str, force: bool) -> None:
    key = base_recipe_key()
    if not force and image_label(LOCAL_BASE, BASE_LABEL) == key:
        log(f"base {LOCAL_BASE}: up to date ({image_size_mb(LOCAL_BASE):.0f} MB)")
        return
    ensure_debootstrap()
    started = time.monotonic()
    log(f"base {LOCAL_BASE}: debootstrap {DEBIAN_SUITE} ({DEBIAN_PACKAGES}) from {mirror}")
    with tempfile.TemporaryDirectory(prefix="ferry-rootfs-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(["debootstrap", "--variant=minbase", f"--include={DEBIAN_PACKAGES}", DEBIAN_SUITE,
             str(rootfs), mirror], quiet=True)  # fmt: skip
        trim_rootfs(rootfs)
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        changes = ["ENV LANG=C.UTF-8", f"LABEL {BASE_LABEL}={key}", 'CMD ["python3"]']
        run(
            ["docker", "import", *(f"--change={c}" for c in changes), "-", LOCAL_BASE],
            stdin=tar.stdout,
            quiet=True,
        )
        if tar.wait() != 0:
            raise BuildError("tar of the base rootfs failed")
    took = time.monotonic() - started
    log(f"base {LOCAL_BASE}: made in {took:.0f} s ({image_size_mb(LOCAL_BASE):.0f} MB)")


def trim_rootfs(rootfs: Path) -> None:
    for part in TRIM:
        for child in sorted((rootfs / part).glob("*")):
            if part == "usr/share/doc" and child.is_dir() and not child.is_symlink():
                for doc in child.iterdir():
                    if doc.name != "copyright":
                        _remove(doc)
            elif child.name != "lock":
                _remove(child)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink()


# ---- wheels ---------------------------------------------------------------------------------


def engine_platforms() -> list[str]:
    """The wheel platform tags that the engine's architecture runs."""
    arch = output(["docker", "version", "--format", "{{.Server.Arch}}"])
    if arch not in ENGINE_ARCHS:
        raise BuildError(f"no wheel platform known for the engine's architecture {arch!r}")
    machine = ENGINE_ARCHS[arch]
    return [f"manylinux_2_{minor}_{machine}" for minor in GLIBC_MINORS] + [
        f"manylinux2014_{machine}"
    ]


def dependency_wheels(platforms: list[str], download: bool) -> Path | None:
    """The folder of the locked third-party wheels (downloaded once per lock), or None when
    they are not downloaded yet and download is False."""
    flags = ["--frozen", "--no-dev", "--no-emit-workspace", "--no-header", "--quiet"]
    for package in IMAGE_PACKAGES:
        flags += ["--package", package]
    exported = output([*python_tool("uv"), "export", *flags, "--directory", str(ROOT)])
    # Without the "# via" comments, which change whenever a workspace member is added.
    requirements = "\n".join(
        line for line in exported.splitlines() if not line.lstrip().startswith("#")
    )
    recipe = f"{platforms}|{PYTHON_VERSION}|{requirements}"
    key = hashlib.sha256(recipe.encode()).hexdigest()[:16]
    folder = CACHE / "pypi" / key
    if (folder / ".complete").exists():
        return folder
    if not download:
        return None
    log(f"downloading dependency wheels for CPython {PYTHON_VERSION} on {platforms[-1]}")
    if folder.parent.exists():
        shutil.rmtree(folder.parent)  # older locks' wheels
    folder.mkdir(parents=True)
    req_file = folder / ".requirements.txt"
    req_file.write_text(requirements + "\n")
    flags = "--quiet --disable-pip-version-check --no-deps --only-binary=:all: --implementation cp"
    tags = [f"--platform={tag}" for tag in platforms]
    run([*python_tool("pip"), "download", *flags.split(), "--python-version", PYTHON_VERSION,
         *tags, "-r", str(req_file), "-d", str(folder)])  # fmt: skip
    (folder / ".complete").touch()
    return folder


def stage_context(deps: Path) -> Path:
    """deploy/.cache/context: the wheels and the files the Dockerfile copies."""
    context = CACHE / "context"
    if context.exists():
        shutil.rmtree(context)
    context.mkdir()
    out_dir = context / "wheels" / "ferry"
    for package in IMAGE_PACKAGES:  # uv build takes one --package at a time
        run([*python_tool("uv"), "build", "--package", package, "--wheel", "--quiet",
             "--directory", str(ROOT), "--out-dir", str(out_dir)])  # fmt: skip
    for stray in out_dir.glob(".*"):  # uv writes a .gitignore there
        stray.unlink()
    shutil.copytree(deps, context / "wheels" / "deps", ignore=shutil.ignore_patterns(".*"))
    for name in CONTEXT_FILES:
        shutil.copy2(DEPLOY / name, context / name)
    (context / "healthcheck.py").chmod(0o755)
    return context


def content_hash(path: Path) -> str:
    """A file's hash; a wheel's is that of its members' names and bytes, since a wheel built
    again from the same tree differs in its zip timestamps (ferry_native's dist-info), which
    made every run rebuild the image (24-54 s, twice per `make test`)."""
    if path.suffix != ".whl":
        return hashlib.sha256(path.read_bytes()).hexdigest()
    digest = hashlib.sha256()
    with zipfile.ZipFile(path) as wheel:
        for name in sorted(wheel.namelist()):
            digest.update(f"{name}={hashlib.sha256(wheel.read(name)).hexdigest()}\n".encode())
    return digest.hexdigest()


def build_key(context: Path, base: str) -> str:
    digest = hashlib.sha256()
    digest.update(f"base={base}@{inspect(base, '{{.Id}}') or 'registry'}\n".encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        rel = path.relative_to(context).as_posix()
        digest.update(f"{rel}={content_hash(path)}\n".encode())
    return digest.hexdigest()[:16]


# ---- the whole build ------------------------------------------------------------------------


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """Several `make` runs on one machine share deploy/.cache and the image tags."""
    CACHE.mkdir(exist_ok=True)
    with open(CACHE / "build.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


def resolve_base(args: argparse.Namespace) -> str:
    if args.base != "local":
        return str(args.base)
    if args.offline:
        if image_label(LOCAL_BASE, BASE_LABEL) != base_recipe_key():
            raise BuildError(f"the base {LOCAL_BASE} is missing or outdated: run `make images`")
        return LOCAL_BASE
    try:
        make_local_base(args.mirror, args.rebuild)
    except BuildError as exc:
        if shutil.which("debootstrap"):
            raise
        log(f"{exc}; using {REGISTRY_BASE} instead")
        return REGISTRY_BASE
    return LOCAL_BASE


def build(args: argparse.Namespace) -> int:
    base = resolve_base(args)
    deps = dependency_wheels(engine_platforms(), download=not args.offline)
    if deps is None:
        log("the wheels of the locked dependencies are not downloaded yet: run `make images`")
        return 1
    context = stage_context(deps)
    key = build_key(context, base)
    current = image_label(args.tag, KEY_LABEL)
    if current == key and not args.rebuild:
        log(f"{args.tag}: up to date ({image_size_mb(args.tag):.0f} MB)")
        return 0
    started = time.monotonic()
    log(f"{args.tag}: docker build on {base}")
    command = [
        "docker",
        "build",
        "--quiet",
        "--build-arg",
        f"BASE={base}",
        "--label",
        f"{KEY_LABEL}={key}",
        "--tag",
        args.tag,
        "--file",
        str(context / "Dockerfile"),
    ]
    if args.rebuild:
        command.append("--no-cache")
    run([*command, str(context)], env=docker_build_env(), quiet=True)
    took = time.monotonic() - started
    log(f"{args.tag}: built in {took:.0f} s ({image_size_mb(args.tag):.0f} MB)")
    # Images this replaced are now untagged: drop those no container uses.
    probe(["docker", "image", "prune", "--force", "--filter", f"label={KEY_LABEL}"])
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Builds Ferry's Docker images offline.")
    parser.add_argument(
        "--base",
        default=os.environ.get("FERRY_BASE_IMAGE", "local"),
        help=f"image with CPython 3.11; 'local' (default) makes {LOCAL_BASE} with debootstrap; "
        f"e.g. {REGISTRY_BASE} where a registry is reachable",
    )
    parser.add_argument("--tag", default=os.environ.get("FERRY_IMAGE", IMAGE))
    parser.add_argument("--mirror", default=os.environ.get("FERRY_DEBIAN_MIRROR", DEFAULT_MIRROR))
    parser.add_argument("--rebuild", action="store_true", help="ignore every cache")
    parser.add_argument(
        "--offline",
        action="store_true",
        help="use only the base image and wheels already here (exit 1 if they are missing)",
    )
    parser.add_argument(
        "--if-docker", action="store_true", help="do nothing (exit 0) when no engine answers"
    )
    parser.add_argument(
        "--start-engine",
        action="store_true",
        help="start dockerd first when it is installed, not running, and we are root",
    )
    args = parser.parse_args(argv)
    problem = docker_answers()
    if problem and args.start_engine:
        log(f"{problem}: starting dockerd")
        problem = start_engine()
    if problem:
        log(f"{problem}: images not built" + (", e2e tests will skip" if args.if_docker else ""))
        return 0 if args.if_docker else 1
    try:
        with build_lock():
            return build(args)
    except BuildError as exc:
        log(str(exc))
        return 1


if __name__ == "__main__":
    sys.exit(main())
