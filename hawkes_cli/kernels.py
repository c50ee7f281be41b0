"""OpenCL runtime: kernel sources, build options, device discovery and selection, programs.

Only this module and the OpenCL engines (:mod:`hawkes_cli.engine.device`,
:mod:`~hawkes_cli.engine.opencl`, :mod:`~hawkes_cli.engine.truncated`) import :mod:`pyopencl`,
and only inside functions, so ``hawkes-run --help`` never loads an OpenCL driver.

A program is named by its precision and variant (``truncated`` or not); its source
(:func:`program_source`) and build options (:func:`build_options`) are fixed by those two, and
:func:`kernel_fingerprint` hashes everything a set of programs compiled, for provenance.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from . import gpu_probe
from .errors import DeviceError, GpuNotUsedError
from .vocab import PRECISIONS

log = logging.getLogger(__name__)

KERNEL_FILE = "hawkes.cl"
TRUNCATED_FILE = "truncated.cl"  # compiled after KERNEL_FILE, whose definitions it uses
DEVICE_ENV = "HAWKES_OPENCL_DEVICE"
#: Hermite terms per coordinate of truncated.cl's expansion boxes (HERM_P; their moments are
#: HERMITE_ORDER^2 per prefix): with boxes of grid.BOX_SIDE (2) kernel lengthscales, 23 terms
#: leave at most 2.1e-11 of a box's weight per coordinate.
HERMITE_ORDER = 23
#: Sources per prefix of those moments (HERM_STRIDE): a row block sums up to this many
#: sources of a box pair by pair beyond its Hermite series.
HERMITE_STRIDE = 8


def kernel_dir() -> Path:
    """Directory holding the OpenCL sources.

    Installed wheels carry them as ``hawkes_cli/_kernels`` (hatchling ``force-include``); a
    source checkout has them in ``kernels/`` next to the package.
    """
    packaged = resources.files("hawkes_cli").joinpath("_kernels")
    if packaged.joinpath(KERNEL_FILE).is_file():
        return Path(str(packaged))
    checkout = Path(__file__).resolve().parent.parent / "kernels"
    if (checkout / KERNEL_FILE).is_file():
        return checkout
    raise DeviceError(
        f"OpenCL source {KERNEL_FILE} not found in {packaged} nor {checkout}; "
        "reinstall the package (pip install .)"
    )


@lru_cache(maxsize=1)
def kernel_source() -> str:
    """The OpenCL C source of the likelihood kernels."""
    return (kernel_dir() / KERNEL_FILE).read_text(encoding="utf-8")


@lru_cache(maxsize=1)
def truncated_source() -> str:
    """The OpenCL C source of the truncated-trigger kernels (appended to :func:`kernel_source`)."""
    return (kernel_dir() / TRUNCATED_FILE).read_text(encoding="utf-8")


def program_files(truncated: bool = False) -> tuple[str, ...]:
    """The source files of a program, in compilation order (``hawkes.cl``, then
    ``truncated.cl`` for the truncated variant)."""
    return (KERNEL_FILE, TRUNCATED_FILE) if truncated else (KERNEL_FILE,)


def program_source(truncated: bool = False) -> str:
    """The OpenCL C source a program compiles: its files joined by newlines."""
    return kernel_source() + ("\n" + truncated_source() if truncated else "")


def build_options(precision: str) -> tuple[str, ...]:
    """The compiler options of a program at ``precision`` (one of :data:`PRECISIONS`)."""
    if precision not in PRECISIONS:
        raise DeviceError(f"precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    return (
        f"-DREAL_IS_DOUBLE={1 if precision == 'float64' else 0}",
        f"-DHERM_P={HERMITE_ORDER}",
        f"-DHERM_STRIDE={HERMITE_STRIDE}",
    )


def kernel_fingerprint(programs: Iterable[tuple[str, bool]]) -> str:
    """SHA-256 (hex) of everything the given programs compile, for provenance.

    Parameters
    ----------
    programs
        ``(precision, truncated)`` of each program an engine built (order and repeats do not
        matter).

    Returns
    -------
    str
        The hash of, for each distinct program in sorted order, its precision, file names,
        build options and the SHA-256 of its source; ``""`` when ``programs`` is empty.
    """
    specs = sorted(set(programs))
    if not specs:
        return ""
    described = [
        {
            "precision": precision,
            "files": list(program_files(truncated)),
            "options": list(build_options(precision)),
            "source_sha256": hashlib.sha256(program_source(truncated).encode("utf-8")).hexdigest(),
        }
        for precision, truncated in specs
    ]
    text = json.dumps(described, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _cl() -> Any:
    try:
        import pyopencl as cl
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise DeviceError(
            f"pyopencl is not importable ({exc}); install it with "
            "`pip install pyopencl pocl-binary-distribution`"
        ) from None
    return cl


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device as listed by :func:`list_devices`."""

    platform_index: int
    device_index: int
    platform: str
    name: str
    kind: str  # "gpu", "cpu", "accelerator" or "other"
    compute_units: int
    global_mem_mb: int
    float64: bool
    #: An OpenCL *simulator* (Oclgrind reports itself as a GPU): for checking kernels, orders
    #: of magnitude slower than a device, never chosen unless named.
    simulator: bool = False
    #: Alignment of every buffer's start (CL_DEVICE_MEM_BASE_ADDR_ALIGN), bytes.
    base_align_bytes: int = 128

    @property
    def ident(self) -> str:
        """``PLATFORM:DEVICE`` indices, the form accepted by ``engine.device``."""
        return f"{self.platform_index}:{self.device_index}"


def _kind(dev: Any, cl: Any) -> str:
    t = dev.type
    if t & cl.device_type.GPU:
        return "gpu"
    if t & cl.device_type.CPU:
        return "cpu"
    if t & cl.device_type.ACCELERATOR:
        return "accelerator"
    return "other"


def _all_devices() -> list[tuple[DeviceInfo, Any]]:
    cl = _cl()
    try:
        platforms = cl.get_platforms()
    except cl.Error as exc:
        raise DeviceError(
            f"no OpenCL platform found ({exc}); install a driver, e.g. "
            "`pip install pocl-binary-distribution` for a CPU device"
        ) from None
    found = []
    for pi, plat in enumerate(platforms):
        try:
            devices = plat.get_devices()
        except cl.Error:  # a platform with no devices
            continue
        for di, dev in enumerate(devices):
            info = DeviceInfo(
                platform_index=pi,
                device_index=di,
                platform=plat.name.strip(),
                name=dev.name.strip(),
                kind=_kind(dev, cl),
                compute_units=int(dev.max_compute_units),
                global_mem_mb=int(dev.global_mem_size) // 2**20,
                float64=bool(dev.double_fp_config),
                simulator=is_simulator(plat.name, dev.name),
                base_align_bytes=int(dev.mem_base_addr_align) // 8,
            )
            found.append((info, dev))
    return found


#: Platform or device names of OpenCL simulators (lower case).
SIMULATORS = ("oclgrind",)


def is_simulator(platform: str, name: str) -> bool:
    """Whether a platform / device name is an OpenCL simulator (:data:`SIMULATORS`)."""
    text = f"{platform} {name}".lower()
    return any(s in text for s in SIMULATORS)


#: A kernel any OpenCL C compiler builds: a device whose compiler rejects it cannot run ours.
PROBE_SOURCE = "__kernel void hawkes_probe(__global int *a) { a[get_global_id(0)] = 1; }"
#: What to do when PoCL's LLVM does not know the host CPU (a CPU newer than that LLVM).
UNKNOWN_CPU_HINT = (
    "this OpenCL CPU driver's compiler does not know this processor (a CPU newer than its "
    "LLVM); install a PoCL built with a newer LLVM (Debian/Ubuntu: `apt-get install "
    "pocl-opencl-icd`), which `bash scripts/setup.sh` does as root, or use a GPU"
)
_PROBES: dict[tuple[str, str, int], str | None] = {}


def build_problem(info: DeviceInfo, dev: Any) -> str | None:
    """Why ``dev`` cannot build OpenCL programs on this machine, or ``None`` if it can.

    Builds :data:`PROBE_SOURCE` once per process and device. A CPU driver can be present and
    still unable to compile anything: PoCL 3.0's LLVM 14 names an AMD Zen 5 processor
    ``generic``, a target its clang rejects ("unknown target CPU 'generic'"). The probe builds
    under :func:`build_lock` and is retried once when it fails without a compiler error, as
    :func:`build_program` is: eight processes probing an empty PoCL cache at once on two busy
    cores once failed that way (``tests/test_kernel_cache_race.py``).

    Returns
    -------
    str or None
        The compiler's first error line (with :data:`UNKNOWN_CPU_HINT` where it applies).
    """
    key = (info.platform, info.name, info.platform_index)
    if key in _PROBES:
        return _PROBES[key]
    cl = _cl()
    problem = None
    with build_lock():  # as build_program: PoCL's cache is shared with every process
        text = _probe(cl, dev)
        if text is not None and not _compiler_error(text):
            # no compiler error: the cache caught mid-write (pocl/pocl#1480); once more
            log.info("OpenCL probe build failed without a compiler error; retrying once")
            time.sleep(BUILD_RETRY_WAIT_S)
            text = _probe(cl, dev)
    if text is not None:
        lines = [ln.strip() for ln in text.splitlines() if "error" in ln.lower()]
        problem = next((ln for ln in lines if ln.startswith("error:")), lines[0] if lines else "")
        if "unknown target cpu" in text.lower():
            problem = f"{problem}: {UNKNOWN_CPU_HINT}"
        problem = problem or "the OpenCL compiler rejected a trivial kernel"
    _PROBES[key] = problem
    return problem


def _probe(cl: Any, dev: Any) -> str | None:
    """One build of :data:`PROBE_SOURCE` on ``dev``: None, or what pyopencl and the compiler
    said when it failed."""
    try:
        with compiler_output() as output:
            cl.Program(cl.Context([dev]), PROBE_SOURCE).build()
    except cl.Error as exc:
        return f"{exc}\n{output.text}"
    return None


def device_problem(ident: str) -> str | None:
    """:func:`build_problem` of the device with ``P:D`` indices ``ident`` (None: it builds, or
    there is no such device)."""
    for info, dev in _all_devices():
        if info.ident == ident:
            return None if info.simulator else build_problem(info, dev)
    return None


def _usable(candidates: list[tuple[DeviceInfo, Any]]) -> list[tuple[DeviceInfo, Any]]:
    """``candidates`` whose compiler builds a trivial kernel (:func:`build_problem`); an INFO
    record names each one left out. Raises :class:`DeviceError` when none is left."""
    kept, dropped = [], []
    for info, dev in candidates:
        problem = None if info.simulator else build_problem(info, dev)
        if problem is None:
            kept.append((info, dev))
        else:
            dropped.append((f"{info.ident} {info.name} ({info.platform})", problem))
    if candidates and not kept:
        raise DeviceError(
            "no OpenCL device here can build kernels: "
            + "; ".join(f"{label}: {problem}" for label, problem in dropped)
        )
    for label, problem in dropped:  # another one was chosen: nothing for the user to do
        log.info("OpenCL device %s cannot build kernels, not chosen: %s", label, problem)
    return kept


def list_devices() -> list[DeviceInfo]:
    """All OpenCL devices of all platforms, in platform then device order."""
    return [info for info, _ in _all_devices()]


def list_devices_checked() -> list[tuple[DeviceInfo, str | None]]:
    """:func:`list_devices` with each device's :func:`build_problem` (``None``: it builds
    kernels, or it is a simulator, whose build is not probed); a device with a problem is
    skipped by the automatic and by-kind choices of :func:`select_device`."""
    return [
        (info, None if info.simulator else build_problem(info, dev)) for info, dev in _all_devices()
    ]


def unlisted_gpus(devices: Iterable[DeviceInfo]) -> tuple[gpu_probe.UnlistedGpu, ...]:
    """GPUs this machine shows that OpenCL does not list among ``devices``
    (:func:`hawkes_cli.gpu_probe.unlisted_gpus` on this machine and environment)."""
    listed = [f"{d.platform} {d.name}" for d in devices if d.kind == "gpu" and not d.simulator]
    return gpu_probe.unlisted_gpus(listed)


def _gpu_note(devices: Iterable[DeviceInfo]) -> str:
    """The summary of each GPU this machine shows that OpenCL does not list
    (:func:`unlisted_gpus`), joined by "; ", or ""."""
    return "; ".join(f.summary() for f in unlisted_gpus(devices))


def device_spec(spec: str | None) -> str | None:
    """The device spec a choice follows: ``spec``, else ``$HAWKES_OPENCL_DEVICE`` when set and
    not empty, else None (automatic)."""
    return spec if spec is not None else os.environ.get(DEVICE_ENV) or None


def select_device(spec: str | None = None, local_rank: int = 0) -> tuple[DeviceInfo, Any]:
    """Choose the OpenCL device this process drives.

    Parameters
    ----------
    spec
        ``None`` (use ``$HAWKES_OPENCL_DEVICE`` if set, else automatic: the GPUs, else every
        device), ``"P:D"`` platform and device indices, ``"gpu"`` / ``"cpu"`` (that kind only),
        or a case-insensitive substring of the device name. A simulator (Oclgrind,
        :func:`is_simulator`) is chosen only by its indices or name. The automatic and by-kind
        choices skip a device whose compiler cannot build a trivial kernel
        (:func:`build_problem`, logged at INFO); a device named by index or name is taken as is.
    local_rank
        This process's rank on its node; among several matching devices, device
        ``local_rank % count`` is taken, so ranks of one node spread over its GPUs.

    Returns
    -------
    (DeviceInfo, pyopencl.Device)

    Raises
    ------
    DeviceError
        No device at all, or none matching ``spec`` (the message lists what exists, and a GPU
        this machine shows that OpenCL does not list: :func:`unlisted_gpus`).
    GpuNotUsedError
        The automatic choice (``spec`` and ``$HAWKES_OPENCL_DEVICE`` unset) is no GPU though
        the environment gives this process GPUs (:func:`hawkes_cli.gpu_probe.gpu_request`:
        Slurm's or the user's ``CUDA_VISIBLE_DEVICES``...). Naming the device (``"cpu"``,
        ``"P:D"``, a name) runs on it; without GPUs given, the automatic choice of a CPU logs
        a WARNING where this machine shows a GPU that OpenCL does not list.
    """
    named = "" if spec is not None or device_spec(None) is None else f" ({DEVICE_ENV})"
    spec = device_spec(spec)
    devices = _all_devices()
    if not devices:
        note = _gpu_note([])
        raise DeviceError(
            "no OpenCL device found; install a driver, e.g. "
            "`pip install pocl-binary-distribution` for a CPU device"
            + (f". Also, {note} (`hawkes-run devices` says how to register it)" if note else "")
        )
    listing = "; ".join(f"{i.ident} {i.name} ({i.kind})" for i, _ in devices)
    real = [d for d in devices if not d[0].simulator]
    if spec is None:
        if not real:
            raise DeviceError(
                f"only an OpenCL simulator was found ({listing}), which is never used unless "
                "named; install a driver (e.g. `pip install pocl-binary-distribution` for a "
                "CPU device) or name the simulator with --device / engine.device"
            )
        gpus = [d for d in real if d[0].kind == "gpu"]
        chosen = _usable(gpus or real)
    elif ":" in spec and all(p.strip().isdigit() for p in spec.split(":", 1)):
        chosen = [d for d in devices if d[0].ident == spec.replace(" ", "")]
    elif spec.lower() in ("gpu", "cpu", "accelerator"):  # a simulator only by name or index
        chosen = _usable([d for d in real if d[0].kind == spec.lower()])
    else:
        chosen = [d for d in devices if spec.lower() in d[0].name.lower()]
    if not chosen:
        note = _gpu_note(i for i, _ in devices) if spec.lower() == "gpu" else ""
        raise DeviceError(
            f"no OpenCL device matches {spec!r}{named}; available: {listing}. "
            + (f"{note[0].upper()}{note[1:]}; `hawkes-run devices` says how to make it "
               "visible" if note else "Use P:D indices from `hawkes-run devices`, 'gpu', 'cpu' "
               "or part of a name")
        )  # fmt: skip
    info, dev = chosen[local_rank % len(chosen)]
    if spec is None and info.kind != "gpu":
        _not_a_gpu(info, [i for i, _ in devices])
    return info, dev


def _not_a_gpu(info: DeviceInfo, devices: list[DeviceInfo]) -> None:
    """The automatic choice took ``info``, no GPU: refuse where GPUs were given
    (:func:`hawkes_cli.gpu_probe.gpu_request`), else warn where this machine shows a GPU that
    OpenCL does not list."""
    request = gpu_probe.gpu_request(os.environ)
    note = _gpu_note(devices)
    if request is not None:
        why = f"{note[0].upper()}{note[1:]}. " if note else ""
        raise GpuNotUsedError(
            f"{request} gives this process GPUs on {socket.gethostname()}, but OpenCL lists "
            f"no GPU there: the automatic device choice (engine.device unset) would run on the "
            f"{info.kind} device {info.ident} {info.name!r} ({info.platform}), so it stopped "
            f"before running anything. {why}Make the GPU visible to OpenCL (`hawkes-run devices` "
            "shows what it lists and how to add a GPU it misses), or run on the CPU on purpose "
            f"with engine.device: cpu in the config (or {DEVICE_ENV}=cpu)"
        )
    if note:
        log.warning(
            "OpenCL lists no GPU, so this runs on the %s device %s %r: %s; `hawkes-run "
            "devices` says how to make it visible", info.kind, info.ident, info.name, note,
        )  # fmt: skip


def check_gpu_use(spec: str | None) -> None:
    """What :func:`select_device` says of the automatic choice in each chain, said once by a
    launcher (``hawkes-run local``) before it writes anything: raise
    :class:`~hawkes_cli.errors.GpuNotUsedError` where GPUs were given and the choice would
    not take one; log a WARNING where it would take a CPU and this machine shows a GPU that
    OpenCL does not list.

    A device named by ``spec`` (or ``$HAWKES_OPENCL_DEVICE``) must be found here: a
    :class:`~hawkes_cli.errors.DeviceError` now rather than one failure per chain. Otherwise
    the OpenCL driver is loaded only where GPUs were given or the machine shows one
    (:func:`hawkes_cli.gpu_probe.unlisted_gpus`).
    """
    if device_spec(spec) is not None:  # named: it must exist here (one error, not N chains')
        select_device(spec)
        return
    if gpu_probe.gpu_request(os.environ) is not None or unlisted_gpus([]):
        select_device(spec)


def require_float64(info: DeviceInfo) -> None:
    """Raise :class:`DeviceError` unless the device supports float64 (cl_khr_fp64).

    The kernels accumulate every row in float64 whatever the working precision.
    """
    if not info.float64:
        raise DeviceError(
            f"OpenCL device {info.ident} {info.name!r} has no float64 support (cl_khr_fp64), "
            "which the likelihood kernels need for their float64 accumulation; choose another "
            "device with --device / engine.device (see `hawkes-run devices`)"
        )


#: Bytes of the widest vector a kernel loads from or stores to a buffer (double16 and int16
#: in truncated.cl, double8 in hawkes.cl). Every such access indexes an array of that vector
#: type from a buffer's start, so it is aligned when the buffer is; OpenCL guarantees the
#: size of long16 (128 bytes) for a full-profile device.
WIDEST_VECTOR_BYTES = 128


def require_alignment(info: DeviceInfo) -> None:
    """Raise :class:`DeviceError` unless the device aligns buffers for the kernels' widest
    vector loads (:data:`WIDEST_VECTOR_BYTES`)."""
    if info.base_align_bytes < WIDEST_VECTOR_BYTES:
        raise DeviceError(
            f"OpenCL device {info.ident} {info.name!r} aligns buffers to "
            f"{info.base_align_bytes} bytes, but the likelihood kernels load "
            f"{WIDEST_VECTOR_BYTES}-byte vectors (double16), which need that alignment; choose "
            "another device with --device / engine.device (see `hawkes-run devices`)"
        )


_CONTEXTS: dict[int, Any] = {}
_PROGRAMS: dict[tuple[int, str], Any] = {}  # (context, precision[+truncated])


def device_context(device: Any) -> Any:
    """The process's one OpenCL context for ``device`` (shared by all engines on it, so the
    program is built once per process and precision)."""
    ctx = _CONTEXTS.get(device.int_ptr)
    if ctx is None:
        ctx = _CONTEXTS[device.int_ptr] = _cl().Context([device])
    return ctx


@dataclass
class CompilerOutput:
    """What the OpenCL compiler wrote to the process's standard error (filled on exit of
    :func:`compiler_output`)."""

    text: str = ""


@contextmanager
def compiler_output() -> Iterator[CompilerOutput]:
    """Keep what is written to file descriptor 2 inside the block off the terminal.

    The OpenCL compiler (PoCL's clang) writes notes such as ``"68 warnings generated."``
    straight to the process's standard error, below Python; they mean nothing to a user. The
    block's output goes to a temporary file instead and, on exit, to this module's log at
    debug level (one record per line) and to the yielded :class:`CompilerOutput`.
    """
    out = CompilerOutput()
    with suppress(AttributeError, OSError, ValueError):  # no usable sys.stderr
        sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no descriptor 2 at all: nothing can reach a terminal
        yield out
        return
    with tempfile.TemporaryFile() as sink:
        os.dup2(sink.fileno(), 2)
        try:
            yield out
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            sink.seek(0)
            out.text = sink.read().decode("utf-8", errors="replace").strip()
    for line in out.text.splitlines():
        log.debug("OpenCL compiler: %s", line)


#: Free bytes below which a kernel cache folder is named as the likely cause of a failed build.
CACHE_LOW_BYTES = 64 * 1024 * 1024


def pocl_cache_dir() -> Path:
    """The folder of PoCL's kernel cache as PoCL itself chooses it: ``$POCL_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/pocl``, else ``~/.cache/pocl``."""
    if os.environ.get("POCL_CACHE_DIR"):
        return Path(os.environ["POCL_CACHE_DIR"])
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "pocl"


def _cache_space_hint() -> str:
    """A line naming the OpenCL kernel cache folders (PoCL's, pyopencl's) that are nearly full,
    "" when none is: a full ``$HOME`` makes the compiler fail with no word of disk space."""
    home = Path.home() / ".cache"
    for folder in (pocl_cache_dir(), home / "pocl", home / "pyopencl", home):
        probe = next((p for p in (folder, *folder.parents) if p.exists()), None)
        if probe is None:
            continue
        try:
            free = shutil.disk_usage(probe).free
        except OSError:
            continue
        if free < CACHE_LOW_BYTES:
            return (
                f"\nthe kernel cache folder {folder} has only {free:,} bytes free: free some "
                "space there, or point POCL_CACHE_DIR (and XDG_CACHE_HOME) at a disk with room"
            )
    return ""


#: The lock file, in PoCL's cache folder, that this package's processes hold while they build.
BUILD_LOCK_FILE = "hawkes-build.lock"

#: Seconds to wait before the one retry of a build that failed without a compiler error.
BUILD_RETRY_WAIT_S = 1.0


@contextmanager
def build_lock() -> Iterator[None]:
    """Hold an exclusive ``flock`` on :data:`BUILD_LOCK_FILE` in PoCL's kernel cache folder.

    PoCL's kernel cache is not safe for several processes building the same program at once
    (pocl/pocl#430, #1480: "Device ... failed to build the program" with no error in the log);
    four chains started together do exactly that. Holding this lock, one process builds and
    fills the cache while the others wait, then read it. Where the lock cannot be taken (a
    read-only or lock-less file system) the build goes on unlocked, logged at debug level.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        yield
        return
    path = pocl_cache_dir() / BUILD_LOCK_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError as exc:
        log.debug("kernel build unlocked (%s: %s)", path, exc)
        yield
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError as exc:
            log.debug("kernel build unlocked (flock %s: %s)", path, exc)
        yield
    finally:
        os.close(fd)  # releases the lock


def build_program(context: Any, precision: str, *, truncated: bool = False) -> Any:
    """Build (once per process, context, precision and variant) the likelihood program.

    ``truncated=True`` builds ``hawkes.cl`` followed by ``truncated.cl`` (the error-bounded
    trigger of :mod:`hawkes_cli.engine.truncated`); the default builds ``hawkes.cl`` alone
    (:func:`program_source`, with :func:`build_options`).

    Raises
    ------
    DeviceError
        If the OpenCL compiler rejects the source (the build log is included).
    """
    options = list(build_options(precision))
    key = (context.int_ptr, precision + ("+truncated" if truncated else ""), *options)
    prog = _PROGRAMS.get(key)
    if prog is not None:
        return prog
    cl = _cl()
    with build_lock():
        try:
            prog = _build(cl, context, truncated, options)
        except _BuildFailed as exc:
            if _compiler_error(exc.text):
                raise _build_error(truncated, exc.text) from None
            # no compiler error in the log: PoCL's cache was caught mid-write by a process
            # outside this lock (pocl/pocl#1480); once more, after it has settled
            log.info("OpenCL build failed without a compiler error; retrying once")
            time.sleep(BUILD_RETRY_WAIT_S)
            try:
                prog = _build(cl, context, truncated, options)
            except _BuildFailed as again:
                raise _build_error(truncated, again.text) from None
    log.debug("built %s for %s (truncated: %s)", KERNEL_FILE, precision, truncated)
    _PROGRAMS[key] = prog
    return prog


class _BuildFailed(Exception):
    """A failed build; ``text`` is pyopencl's message and what the compiler wrote."""

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text


def _build(cl: Any, context: Any, truncated: bool, options: list[str]) -> Any:
    """One build of the program; the compiler's output goes to the log (debug).

    Raises
    ------
    _BuildFailed
        With pyopencl's message and the compiler's output.
    """
    output = CompilerOutput()
    try:
        with compiler_output() as output, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            prog = cl.Program(context, program_source(truncated)).build(options=options)
    except cl.RuntimeError as exc:
        raise _BuildFailed(f"{exc}\n{output.text}" if output.text else str(exc)) from None
    for w in caught:  # e.g. PoCL's vector-ABI notes on our own functions; not for the CLI
        log.debug("OpenCL compiler: %s", w.message)
    return prog


def _compiler_error(text: str) -> bool:
    """Whether a failed build's log names a compiler error (``error:``), as opposed to a
    device that gave up with warnings only."""
    return "error:" in text.lower() or "unknown target cpu" in text.lower()


def _build_error(truncated: bool, text: str) -> DeviceError:
    """The :class:`DeviceError` of a failed build, with its log and the hints that apply."""
    name = KERNEL_FILE + (f" + {TRUNCATED_FILE}" if truncated else "")
    hint = f"\n{UNKNOWN_CPU_HINT}" if "unknown target cpu" in text.lower() else ""
    hint += _cache_space_hint()
    return DeviceError(f"OpenCL build of {name} failed:\n{text}{hint}")
