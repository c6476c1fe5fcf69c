"""Build llama.cpp's ``llama-server`` once, from a pinned source that PyPI serves.

The ``llama-cpp-python`` source distribution vendors llama.cpp with its HTTP server
(``vendor/llama.cpp/tools/server``). :func:`llama_server_binary` downloads that sdist with pip,
configures it with cmake (server on, tests, examples and web UI off, tuned for this CPU) and builds
the one ``llama-server`` target into

    <cache>/engines/llama.cpp-<version>-<cpu key>/bin/llama-server

The build takes about 8-10 minutes on 2 cores; later calls find the binary and return at once. The CPU
key is a hash of the CPU's instruction flags, because a native build runs only on CPUs that have the
instructions it was built for. Everything goes through a temporary directory and a rename, so an
interrupted build leaves nothing half-made; a lock file serialises concurrent first builds.
"""

from __future__ import annotations

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from ...errors import EngineError
from ...models.offline import cache_root
from ...models.hardware import cpu_flags
from ...locks import file_lock

logger = logging.getLogger(__name__)

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist whose vendored llama.cpp is built
# sha256 of each sdist this project has built and checked: a downloaded archive must match before it is built
SDIST_SHA256 = {"0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
PACKAGES = {"c++": "g++", "cmake": "cmake"}  # the Debian package that puts each build tool on PATH
BINARY = "llama-server"
CMAKE_FLAGS = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_CURL=OFF",
    "-DGGML_NATIVE=ON",
    "-DBUILD_SHARED_LIBS=OFF",
)


def cpu_key() -> str:
    """Eight hex digits naming this CPU's instruction set (a native build runs only where it was built);
    where /proc/cpuinfo has no flags (another OS, or a CPU that lists none) its architecture and model."""
    flags = cpu_flags()
    name = " ".join(sorted(flags)) if flags else f"{platform.machine()} {platform.processor()}"
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def build_dir(cache_dir: str | os.PathLike | None = None, version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    return cache_root(cache_dir) / "engines" / f"llama.cpp-{version}-{cpu_key()}"


def run_logged(cmd: list[str], log: Path, what: str, cwd: Path | None = None) -> None:
    """Run ``cmd`` with its output appended to ``log``; EngineError naming ``what`` failed, with the
    log's last lines, if it exits non-zero (the llama.cpp build, the vLLM install)."""
    with log.open("a") as out:
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        done = subprocess.run(cmd, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise EngineError(f"{what} failed (exit {done.returncode}); full log in {log}:\n" + "\n".join(tail))


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise EngineError(f"building llama-server needs `{name}` on PATH (Debian: apt-get install "
                          f"{PACKAGES.get(name, name)}; it also needs cmake and a C++ compiler)")
    return found


def check_sdist(archive: Path, version: str) -> None:
    """EngineError unless ``archive`` has the sha256 pinned for ``version`` (:data:`SDIST_SHA256`): no
    source that differs from the one this project built and tested is compiled. A version without a
    pin is built with a warning naming its hash."""
    digest = hashlib.sha256(archive.read_bytes()).hexdigest()
    expected = SDIST_SHA256.get(version)
    if expected is None:
        logger.warning("llama-cpp-python %s has no pinned sha256 here; building %s (sha256 %s)", version, archive, digest)
    elif digest != expected:
        raise EngineError(f"the downloaded {archive.name} has sha256 {digest}, not the pinned {expected}: "
                          f"not building a source that differs from the one this project checked")


def _fetch_source(work: Path, version: str, log: Path) -> Path:
    """Download and unpack the llama-cpp-python sdist; return its vendored llama.cpp directory."""
    run_logged([sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
                f"llama-cpp-python=={version}", "-d", str(work)], log,
               "building llama-server: downloading the llama-cpp-python sdist", work)
    archives = sorted(work.glob("llama_cpp_python-*.tar.gz"))
    if not archives:
        raise EngineError(f"pip downloaded no llama-cpp-python=={version} source archive into {work}")
    check_sdist(archives[0], version)
    shutil.unpack_archive(str(archives[0]), str(work))
    source = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if not (source / "tools" / "server").is_dir():
        raise EngineError(f"{archives[0].name} holds no vendored llama.cpp server at {source}")
    return source


def llama_server_binary(cache_dir: str | os.PathLike | None = None, version: str = LLAMA_CPP_PYTHON_VERSION,
                        jobs: int | None = None) -> Path:
    """The path of a built ``llama-server``, building it first if the cache has none (about 8-10 min)."""
    home = build_dir(cache_dir, version)
    binary = home / "bin" / BINARY
    if binary.is_file():
        return binary
    home.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(home.parent / f"{home.name}.lock"):
        if binary.is_file():
            return binary
        cmake, generator = _tool("cmake"), (["-G", "Ninja"] if shutil.which("ninja") else [])
        _tool("c++")
        with tempfile.TemporaryDirectory(dir=home.parent, prefix=".build-") as tmp:
            work = Path(tmp)
            log = home.parent / f"{home.name}.log"
            log.write_text("")
            source = _fetch_source(work, version, log)
            build = work / "build"
            run_logged([cmake, "-S", str(source), "-B", str(build), *generator, *CMAKE_FLAGS], log,
                       "building llama-server: cmake configure", work)
            run_logged([cmake, "--build", str(build), "--target", BINARY, "-j", str(jobs or os.cpu_count() or 2)],
                       log, "building llama-server: cmake build", work)
            built = next(iter(sorted(build.rglob(BINARY))), None)
            if built is None or not built.is_file():
                raise EngineError(f"the build finished but made no {BINARY}; log in {log}")
            staged = work / "staged"
            (staged / "bin").mkdir(parents=True)
            shutil.copy2(built, staged / "bin" / BINARY)
            (staged / "VERSION").write_text(f"llama-cpp-python {version}\ncmake {' '.join(CMAKE_FLAGS)}\n")
            os.replace(staged, home)
    return binary
