"""Build llama.cpp's ``llama-server`` once, from a pinned source that PyPI serves, and check that it runs.

The ``llama-cpp-python`` source distribution vendors llama.cpp with its HTTP server
(``vendor/llama.cpp/tools/server``). :func:`llama_server_binary` downloads that sdist with pip,
configures it with cmake (server on, tests, examples and web UI off, tuned for this CPU), builds the one
``llama-server`` target, and starts it once on a small model (:mod:`.smoke`) before keeping it in

    <cache>/engines/llama.cpp-<version>-<cpu key>[-<what was turned off>]/bin/llama-server

The CPU key is a hash of the CPU's instruction flags, because a native build runs only on CPUs that
have the instructions it was built for; the suffix names the kernels a build left out (``no-amx``), so a
machine of another kind, or a build that kept them, never finds it.

**ggml's AMX kernels and GCC 12.** On an Intel Xeon with AMX a native build compiles ggml's AMX
matrix kernels in. Built by GCC 12 (Debian 12's compiler) at ``-O3`` they died at the first prompt
with an illegal instruction (``tilezero``): GCC 12's ``_tile_loadconfig`` tells the optimiser that the
instruction reads 8 bytes of the 64-byte tile configuration, so the stores of the tiles' rows and
byte counts per row were dropped as dead, ``ldtilecfg`` loaded a configuration of empty tiles, and an AMX
instruction on an unconfigured tile raises #UD. :data:`PATCHES` adds one line before that load telling
the compiler the whole configuration is read, which keeps the AMX path (the fast one) working. Should
a native build still die on its smoke test, it is rebuilt without the AMX kernels
(:data:`RECIPES`: GCC's ``-mno-amx-*``, which override ``-march=native``) and the build log and the
terminal say so; if that dies too, the build fails with an error that names the engine, the signal and
the instruction sets, before anything else runs on it.

The build takes about 8-10 minutes on 2 cores; later calls find the binary and return at once.
Everything goes through a temporary directory and a rename, so an interrupted build leaves nothing
half-made; a lock file serialises concurrent first builds.
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
from dataclasses import dataclass
from pathlib import Path

from ...errors import EngineError, ModelLoadError
from ...models.offline import cache_root, offline_gguf
from ...models.hardware import cpu_flags
from ...locks import file_lock
from .smoke import Smoke, smoke_test

logger = logging.getLogger(__name__)

LLAMA_CPP_PYTHON_VERSION = "0.3.36"  # the sdist whose vendored llama.cpp is built
# sha256 of each sdist this project has built and checked: a downloaded archive must match before it is built
SDIST_SHA256 = {"0.3.36": "832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e"}
PACKAGES = {"c++": "g++", "cmake": "cmake"}  # the Debian package that puts each build tool on PATH
BINARY = "llama-server"
SMOKE_MODEL = "qwen2.5-coder-0.5b"  # the small offline GGUF a new build is started on
SMOKE_FILE = "SMOKE"  # in a build's folder: what its smoke test said (a build without it is tested on first use)
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
# (file under vendor/llama.cpp, the line to find, what goes before it): source fixes applied to the sdist
PATCHES = (
    ("ggml/src/ggml-cpu/amx/mmq.cpp", "    _tile_loadconfig(&tc);\n",
     "    __asm__ __volatile__(\"\" : : \"m\"(tc) : \"memory\");  // lookahead-reasoning: ldtilecfg reads all of tc\n"),
)
AMX_FLAGS = ("amx_tile", "amx_int8", "amx_bf16")


@dataclass(frozen=True)
class Recipe:
    """One way to build: ``name`` ("" for the full native build; else the cache key's suffix), the
    compiler ``flags`` it adds, the CPU ``flags_needed`` for it to differ from the native build, and
    what it turned off, in words."""

    name: str
    cflags: str = ""
    flags_needed: tuple[str, ...] = ()
    turned_off: str = ""

    def cmake_flags(self) -> tuple[str, ...]:
        if not self.cflags:
            return CMAKE_FLAGS
        return (*CMAKE_FLAGS, f"-DCMAKE_C_FLAGS={self.cflags}", f"-DCMAKE_CXX_FLAGS={self.cflags}")


RECIPES = (
    Recipe(""),
    Recipe("no-amx", "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16", AMX_FLAGS, "ggml's AMX kernels"),
)


def cpu_key() -> str:
    """Eight hex digits naming this CPU's instruction set (a native build runs only where it was built);
    where /proc/cpuinfo has no flags (another OS, or a CPU that lists none) its architecture and model."""
    flags = cpu_flags()
    name = " ".join(sorted(flags)) if flags else f"{platform.machine()} {platform.processor()}"
    return hashlib.sha256(name.encode()).hexdigest()[:8]


def build_dir(cache_dir: str | os.PathLike | None = None, recipe: Recipe = RECIPES[0]) -> Path:
    """The folder a build of ``recipe`` for this CPU lives in (whether or not it has been built)."""
    suffix = f"-{recipe.name}" if recipe.name else ""
    return cache_root(cache_dir) / "engines" / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}-{cpu_key()}{suffix}"


def recipes_for_this_cpu() -> list[Recipe]:
    """The recipes worth trying here, in order: the native build, then each that turns off what this CPU has."""
    flags = cpu_flags() or set()
    return [r for r in RECIPES if not r.flags_needed or flags & set(r.flags_needed)]


def built_server(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The folder of this CPU's build that passed its smoke test (or found no model to run it on), if any."""
    for recipe in recipes_for_this_cpu():
        home = build_dir(cache_dir, recipe)
        if (home / "bin" / BINARY).is_file() and (home / SMOKE_FILE).is_file():
            return home
    return None


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


def patch_source(source: Path) -> list[str]:
    """Apply :data:`PATCHES` to the vendored llama.cpp at ``source``; the files patched. EngineError if a
    patched line is not found exactly once (a source other than the one the patch was written for)."""
    done = []
    for name, anchor, before in PATCHES:
        path = source / name
        text = path.read_text(encoding="utf-8") if path.is_file() else ""
        if text.count(anchor) != 1:
            raise EngineError(f"cannot patch {name}: the line {anchor.strip()!r} occurs {text.count(anchor)} times "
                              f"in this llama.cpp source, not once")
        path.write_text(text.replace(anchor, before + anchor), encoding="utf-8")
        done.append(name)
    return done


def _fetch_source(work: Path, log: Path) -> Path:
    """Download, unpack and patch the llama-cpp-python sdist; return its vendored llama.cpp directory."""
    version = LLAMA_CPP_PYTHON_VERSION
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
    with log.open("a") as out:
        out.write(f"patched: {', '.join(patch_source(source))}\n")
    return source


def _compile(source: Path, build: Path, recipe: Recipe, log: Path) -> Path:
    """Configure and build ``llama-server`` from ``source`` into ``build`` as ``recipe`` says; the binary."""
    cmake, generator = _tool("cmake"), (["-G", "Ninja"] if shutil.which("ninja") else [])
    _tool("c++")
    run_logged([cmake, "-S", str(source), "-B", str(build), *generator, *recipe.cmake_flags()], log,
               "building llama-server: cmake configure", build.parent)
    run_logged([cmake, "--build", str(build), "--target", BINARY, "-j", str(os.cpu_count() or 2)],
               log, "building llama-server: cmake build", build.parent)
    built = next(iter(sorted(build.rglob(BINARY))), None)
    if built is None or not built.is_file():
        raise EngineError(f"the build finished but made no {BINARY}; log in {log}")
    return built


def smoke_model(cache_dir: str | os.PathLike | None = None) -> Path | None:
    """The small GGUF a new build is started on (the offline 0.5B), or None where its package is missing."""
    try:
        return offline_gguf(SMOKE_MODEL, cache_dir)
    except ModelLoadError as exc:
        logger.warning("llama-server's smoke test needs the offline %s (%s); the build is kept untested", SMOKE_MODEL,
                       str(exc).split(". ")[0])
        return None


def _smoke(home: Path, model: Path | None, log: Path) -> Smoke:
    """The smoke test of the build in ``home``, recorded there (:data:`SMOKE_FILE`) when it passes."""
    seen = (Smoke(True, f"not run: no small model ({SMOKE_MODEL}) installed") if model is None
            else smoke_test(home / "bin" / BINARY, model, log))
    if seen.passed:
        (home / SMOKE_FILE).write_text(seen.reason + "\n")
    return seen


def _say(log: Path, message: str) -> None:
    """One line in the build log and on the terminal (a warning: the CLI shows warnings)."""
    with log.open("a") as out:
        out.write(message + "\n")
    logger.warning("%s", message)


def instruction_sets() -> str:
    """The vector and matrix instruction sets this CPU announces, for messages (e.g. "amx_int8 avx512f ...")."""
    flags = sorted(f for f in (cpu_flags() or ()) if f.startswith(("amx", "avx", "fma")))
    return " ".join(flags) or f"unknown ({platform.machine()})"


def _described(recipe: Recipe) -> str:
    return "natively (-march=native)" if not recipe.name else f"without {recipe.turned_off} ({recipe.cflags})"


def _stage(built: Path, work: Path, recipe: Recipe) -> Path:
    staged = work / f"staged-{recipe.name or 'native'}"
    (staged / "bin").mkdir(parents=True)
    shutil.copy2(built, staged / "bin" / BINARY)
    patched = ", ".join(name for name, _, _ in PATCHES)
    (staged / "VERSION").write_text(f"llama-cpp-python {LLAMA_CPP_PYTHON_VERSION}\n"
                                    f"cmake {' '.join(recipe.cmake_flags())}\n"
                                    f"patched {patched}\nturned off: {recipe.turned_off or 'nothing'}\n")
    return staged


def _build(cache_dir: str | os.PathLike | None, log: Path) -> Path:
    """Build the recipes worth trying here in order until one passes its smoke test; its binary."""
    model, tried = smoke_model(cache_dir), []
    recipes = recipes_for_this_cpu()
    with tempfile.TemporaryDirectory(dir=log.parent, prefix=".build-") as tmp:
        work, source = Path(tmp), None
        for i, recipe in enumerate(recipes):
            home = build_dir(cache_dir, recipe)
            if (home / "bin" / BINARY).is_file():  # built before builds were smoke-tested: kept if it runs now
                seen = _smoke(home, model, log)
                if seen.passed:
                    return home / "bin" / BINARY
                _say(log, f"the llama-server cached in {home} {seen.reason} on its smoke test: removed, "
                          "building again")
                shutil.rmtree(home)
            source = source or _fetch_source(work, log)
            staged = _stage(_compile(source, work / f"build-{recipe.name or 'native'}", recipe, log), work, recipe)
            seen = _smoke(staged, model, log)
            if seen.passed:
                os.replace(staged, home)
                if recipe.name:
                    _say(log, f"llama-server: kept the build without {recipe.turned_off} ({home})")
                return home / "bin" / BINARY
            tried.append((recipe, seen))
            if not seen.crashed or i + 1 == len(recipes):
                break
            _say(log, f"llama.cpp's llama-server built {_described(recipe)} {seen.reason} on its smoke test "
                      f"(this CPU: {instruction_sets()}); rebuilding it without {recipes[i + 1].turned_off}")
    how = "; ".join(f"built {_described(r)} it {s.reason}" for r, s in tried)
    raise EngineError(f"llama.cpp's llama-server does not run on this CPU: {how}, on its smoke test. The CPU "
                      f"announces {instruction_sets()}. The engine features (serve-engine, --target-url runs, the "
                      f"engine tests) need a server that runs; the build log is {log}")


def llama_server_binary(cache_dir: str | os.PathLike | None = None) -> Path:
    """The path of a built ``llama-server`` that runs on this CPU, building and smoke-testing it first if
    the cache has none (about 8-10 min; twice that where a native build dies and is rebuilt)."""
    home = built_server(cache_dir)
    if home is not None:
        return home / "bin" / BINARY
    base = build_dir(cache_dir)
    base.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(base.parent / f"{base.name}.lock"):
        home = built_server(cache_dir)
        if home is not None:
            return home / "bin" / BINARY
        log = base.parent / f"{base.name}.log"
        log.write_text("")
        return _build(cache_dir, log)
