"""GPUs that OpenCL does not list, and GPUs a scheduler or the user gave this process.

An NVIDIA GPU reaches OpenCL through its driver's ``libnvidia-opencl.so.1``, which the ICD
loader (``libOpenCL``) opens only when an ICD file (a one-line ``*.icd`` naming the library)
registers it. A container or a module system can bring the library and the device nodes
without the ICD file: OpenCL then lists only the CPU, and every run silently uses PoCL. This
module finds such a GPU (:func:`unlisted_gpus`) and words how to register it without root, and
reads the GPUs a process was given (:func:`gpu_request`).

Everything here is a pure function of a filesystem root and an environment mapping (tests fake
each case under a temporary folder): fixed system paths (``/dev``, ``/etc/OpenCL/vendors``, the
driver folders) are looked up under ``root``, paths taken from the environment (``PATH``,
``LD_LIBRARY_PATH``, ``OCL_ICD_VENDORS``) as they are.

How the ICD loader (ocl-icd, the one PyOpenCL's wheels ship, and Debian's) finds drivers:
``$OCL_ICD_VENDORS`` naming a folder *replaces* ``/etc/OpenCL/vendors`` (the ``*.icd`` files
there are no longer read); naming a file ending in ``.icd``, only that one driver is loaded;
naming anything else, it is opened as the driver library itself. Unset or empty,
``$OPENCL_VENDOR_PATH`` or ``/etc/OpenCL/vendors`` is read. PyOpenCL's wheel also reads its own
folder, where ``pocl-binary-distribution`` puts PoCL, whatever the variables say.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

#: Variables that give a process GPUs, in precedence order: the first one set decides
#: (:func:`gpu_request`). Slurm sets ``CUDA_VISIBLE_DEVICES`` (and ``ROCR_VISIBLE_DEVICES`` on
#: AMD) for a job step with GPUs, ``SLURM_STEP_GPUS`` / ``SLURM_JOB_GPUS`` to their indices.
GPU_VARS: tuple[str, ...] = (
    "CUDA_VISIBLE_DEVICES",
    "ROCR_VISIBLE_DEVICES",
    "SLURM_STEP_GPUS",
    "SLURM_JOB_GPUS",
)
#: Values of :data:`GPU_VARS` that give no GPU (compared case-insensitively): ``NoDevFiles``,
#: Slurm's value for GPUs configured without device files, and ``none``. An empty value, or a
#: list whose first id is negative (``-1``: CUDA hides every GPU from the first invalid id on),
#: gives none either.
NO_GPU_VALUES: tuple[str, ...] = ("nodevfiles", "none")
#: The ICD loader's default folder of ``*.icd`` files.
DEFAULT_VENDORS_DIR = "/etc/OpenCL/vendors"
#: Where the ICD file this module suggests goes (a folder of the user's own).
USER_VENDORS_DIR = "$HOME/.local/etc/OpenCL/vendors"


@dataclass(frozen=True)
class GpuRequest:
    """GPUs given to this process by a scheduler or the user.

    Attributes
    ----------
    var
        The variable that gives them (one of :data:`GPU_VARS`).
    value
        Its value (the GPU ids).
    """

    var: str
    value: str

    def __str__(self) -> str:
        return f"{self.var}={self.value}"


def gpu_request(env: Mapping[str, str]) -> GpuRequest | None:
    """The GPUs ``env`` gives this process, or ``None`` when it gives none.

    The first of :data:`GPU_VARS` that is set decides: an empty value, one of
    :data:`NO_GPU_VALUES` or a first id below 0 (``-1``) gives no GPU, even where a later
    variable names some (``CUDA_VISIBLE_DEVICES=`` in a Slurm job with GPUs hides them).
    """
    for var in GPU_VARS:
        value = env.get(var)
        if value is None:
            continue
        first = value.strip().split(",")[0].strip()
        if not first or first.lower() in NO_GPU_VALUES or first.startswith("-"):
            return None
        return GpuRequest(var, value.strip())
    return None


@dataclass(frozen=True)
class Vendor:
    """What shows a vendor's GPU on a machine, and what its OpenCL driver is called.

    Attributes
    ----------
    name
        ``NVIDIA`` or ``AMD``.
    device_globs
        Device nodes of its GPUs (absolute patterns, under the probe's root).
    tools
        Programs on ``PATH`` that come with its driver.
    library
        The file name of its OpenCL driver library.
    library_dirs
        Where drivers put that library (absolute patterns, under the probe's root), before the
        folders of ``LD_LIBRARY_PATH``.
    icd_name
        The usual name of its ICD file.
    listed_as
        Lower-case fragments of an OpenCL GPU's platform or device name that mark it as this
        vendor's.
    """

    name: str
    device_globs: tuple[str, ...]
    tools: tuple[str, ...]
    library: str
    library_dirs: tuple[str, ...]
    icd_name: str
    listed_as: tuple[str, ...]


NVIDIA = Vendor(
    name="NVIDIA",
    device_globs=("/dev/nvidia[0-9]*",),
    tools=("nvidia-smi",),
    library="libnvidia-opencl.so.1",
    library_dirs=(
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/local/nvidia/lib64",
        "/usr/lib/wsl/lib",
    ),
    icd_name="nvidia.icd",
    listed_as=("nvidia",),
)
AMD = Vendor(
    name="AMD",
    device_globs=("/dev/kfd",),
    tools=(),
    library="libamdocl64.so",
    library_dirs=("/opt/rocm/lib", "/opt/rocm*/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64"),
    icd_name="amdocl64.icd",
    listed_as=("amd", "advanced micro devices"),
)
VENDORS: tuple[Vendor, ...] = (NVIDIA, AMD)


@dataclass(frozen=True)
class IcdSearch:
    """The driver registrations the ICD loader reads with this environment.

    Attributes
    ----------
    where
        What it reads, in words (``/etc/OpenCL/vendors``, ``$OCL_ICD_VENDORS=/x``).
    entries
        ``(ICD file, the library it names)`` for each ICD file it reads; ``(path, path)`` when
        ``$OCL_ICD_VENDORS`` names the driver library itself.
    user_folder
        The folder ``$OCL_ICD_VENDORS`` names, or ``None`` (unset, or naming a file).
    khronos_only
        The libraries ``$OCL_ICD_FILENAMES`` names: the Khronos loader opens them, ocl-icd
        does not read that variable.
    """

    where: str
    entries: tuple[tuple[Path, str], ...]
    user_folder: Path | None = None
    khronos_only: tuple[str, ...] = ()

    @property
    def icd_files(self) -> tuple[Path, ...]:
        """The ICD files among :attr:`entries`."""
        return tuple(f for f, _ in self.entries if f.suffix == ".icd")


def _under(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


def _icd_library(path: Path) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return next((ln.strip() for ln in lines if ln.strip()), "")


def _icd_files(folder: Path) -> tuple[Path, ...]:
    try:
        return tuple(sorted(p for p in folder.glob("*.icd") if p.is_file()))
    except OSError:
        return ()


def icd_search(root: Path, env: Mapping[str, str]) -> IcdSearch:
    """What the ICD loader reads under ``root`` with environment ``env`` (module docstring)."""
    default = env.get("OPENCL_VENDOR_PATH") or ""
    default_dir = Path(default) if default else _under(root, DEFAULT_VENDORS_DIR)
    value = env.get("OCL_ICD_VENDORS") or ""
    khronos = tuple(n for n in env.get("OCL_ICD_FILENAMES", "").split(":") if n)
    folder = None
    if not value:
        files = _icd_files(default_dir)
        where = f"$OPENCL_VENDOR_PATH={default}" if default else DEFAULT_VENDORS_DIR
    else:
        where, path = f"$OCL_ICD_VENDORS={value}", Path(value)
        if path.is_dir():
            folder, files = path, _icd_files(path)
        elif value.endswith(".icd"):  # a bare name is looked for in the default folder first
            nearby = default_dir / value if "/" not in value else None
            files = tuple(p for p in (nearby, path) if p is not None and p.is_file())[:1]
        else:  # the driver library itself
            return IcdSearch(where, ((path, value),), None, khronos)
    return IcdSearch(where, tuple((f, _icd_library(f)) for f in files), folder, khronos)


#: Folders the dynamic loader searches without being told (besides ``/etc/ld.so.conf``'s).
LOADER_DIRS: tuple[str, ...] = (
    "/lib",
    "/usr/lib",
    "/lib64",
    "/usr/lib64",
    "/lib/x86_64-linux-gnu",
    "/usr/lib/x86_64-linux-gnu",
)


def _loader_dirs(root: Path, env: Mapping[str, str]) -> set[str]:
    """Folders where the dynamic loader finds a library by its bare name (as paths under
    ``root``): ``LD_LIBRARY_PATH``, ``/etc/ld.so.conf.d/*.conf`` and :data:`LOADER_DIRS`."""
    dirs = {str(_under(root, d)) for d in LOADER_DIRS}
    dirs |= {d.rstrip("/") for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d}
    try:
        confs = sorted(_under(root, "/etc/ld.so.conf.d").glob("*.conf"))
    except OSError:
        confs = []
    for conf in confs:
        try:
            lines = conf.read_text(errors="replace").splitlines()
        except OSError:
            continue
        dirs |= {str(_under(root, ln.strip())) for ln in lines if ln.strip().startswith("/")}
    return {d.rstrip("/") for d in dirs}


def _names(entry: str, library: Path, loader_dirs: set[str]) -> bool:
    """Whether an ICD file's ``entry`` opens ``library``: its path, or its bare file name
    where ``library`` lies in a folder the dynamic loader searches (``loader_dirs``)."""
    if not entry:
        return False
    if "/" not in entry:
        return entry == library.name and str(library.parent).rstrip("/") in loader_dirs
    try:
        return os.path.samefile(entry, library)
    except OSError:
        return entry == str(library)


def _find_library(vendor: Vendor, root: Path, env: Mapping[str, str]) -> Path | None:
    dirs: list[Path] = []
    for pattern in vendor.library_dirs:
        if any(c in pattern for c in "*?["):
            dirs.extend(sorted(root.glob(pattern.lstrip("/"))))
        else:
            dirs.append(_under(root, pattern))
    dirs += [Path(d) for d in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if d]
    for folder in dirs:
        candidate = folder / vendor.library
        if candidate.is_file():
            return candidate
    return None


def _on_path(tool: str, env: Mapping[str, str]) -> Path | None:
    for folder in env.get("PATH", "").split(os.pathsep):
        candidate = Path(folder or ".") / tool
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@dataclass(frozen=True)
class UnlistedGpu:
    """A vendor's GPU this machine shows that OpenCL does not list.

    Attributes
    ----------
    vendor
        What was looked for.
    evidence
        What shows the GPU itself (device nodes, a driver tool on ``PATH``), in words; empty
        when only its driver library, unregistered, shows it.
    library
        Its OpenCL driver library, or ``None`` when none was found.
    registered_by
        The ICD file that names ``library``, or ``None`` when none the loader reads does.
    search
        What the ICD loader reads (:func:`icd_search`).
    """

    vendor: Vendor
    evidence: tuple[str, ...]
    library: Path | None
    registered_by: Path | None
    search: IcdSearch

    def summary(self) -> str:
        """One line: what is there and why OpenCL does not list it."""
        name = self.vendor.name
        if self.evidence:
            seen = f"an {name} GPU is here ({', '.join(self.evidence)}) but OpenCL lists none"
        else:
            seen = f"{name}'s OpenCL driver is installed but OpenCL lists no {name} GPU"
        if self.library is None:
            return (
                f"{seen}: its OpenCL driver {self.vendor.library} is in none of "
                f"{', '.join(self.vendor.library_dirs)} nor LD_LIBRARY_PATH"
            )
        if self.registered_by is None:
            line = f"{seen}: no ICD file in {self.search.where} names its driver {self.library}"
            if self.search.khronos_only and any(
                Path(name).name == self.library.name for name in self.search.khronos_only
            ):
                line += (
                    " ($OCL_ICD_FILENAMES names it, but only the Khronos ICD loader reads that "
                    "variable, not ocl-icd, the loader PyOpenCL's wheels bring)"
                )
            return line
        return (
            f"{seen}, though {self.registered_by} names its driver {self.library}: the driver "
            "found no usable GPU"
        )

    def advice(self) -> tuple[str, ...]:
        """Lines that say how to make the GPU visible to OpenCL without root (shell commands
        indented by two spaces)."""
        if self.library is not None and self.registered_by is not None:
            if self.vendor is NVIDIA:
                return (
                    "check the driver with `nvidia-smi`; in a container the GPU devices must be "
                    "passed in (e.g. `docker run --gpus all`, Slurm's --gres=gpu:N)",
                )
            return ("check the driver with `rocminfo`; in a container /dev/kfd and /dev/dri "
                    "must be passed in",)  # fmt: skip
        library = self.library or f"/PATH/TO/{self.vendor.library}"
        lines = [
            f"find {self.vendor.library} (`ldconfig -p | grep {self.vendor.library}`, or ask "
            "the administrators for the driver's OpenCL part), then register it:"
            if self.library is None
            else "register its OpenCL driver in a folder of your own (no root needed):"
        ]
        own = self.search.user_folder
        if own is not None:  # the loader reads that folder already
            lines.append(f"  echo {library} > {own}/{self.vendor.icd_name}")
        else:
            lines.append(f"  mkdir -p {USER_VENDORS_DIR}")
            if self.search.icd_files:  # the drivers registered now stay registered
                files = " ".join(map(str, self.search.icd_files))
                lines.append(f"  cp {files} {USER_VENDORS_DIR}/")
            lines.append(f"  echo {library} > {USER_VENDORS_DIR}/{self.vendor.icd_name}")
            lines.append(f"  export OCL_ICD_VENDORS={USER_VENDORS_DIR}")
            lines.append(
                f"OCL_ICD_VENDORS naming a folder replaces {DEFAULT_VENDORS_DIR}, so that "
                "folder must hold every driver's ICD file"
                + (" (the cp above)" if self.search.icd_files else "")
                + "; put the export in ~/.bashrc or the job script"
            )
        lines.append("then `hawkes-run devices` lists the GPU")
        return tuple(lines)


def unlisted_gpus(
    listed: Iterable[str],
    *,
    root: Path = Path("/"),
    env: Mapping[str, str] | None = None,
) -> tuple[UnlistedGpu, ...]:
    """GPUs this machine shows that OpenCL does not list.

    A vendor's GPU shows by its device nodes (NVIDIA ``/dev/nvidia0``..., AMD ``/dev/kfd``), a
    driver tool on ``PATH`` (``nvidia-smi``), or its OpenCL driver library found in the usual
    folders or ``LD_LIBRARY_PATH`` with no ICD file the loader reads naming it.

    Parameters
    ----------
    listed
        ``"platform device"`` names of the GPUs OpenCL lists (a vendor with one among them is
        not reported).
    root
        The filesystem root the fixed system paths are looked up under.
    env
        The environment (default ``os.environ``).
    """
    env = os.environ if env is None else env
    listed = [name.lower() for name in listed]
    search = icd_search(root, env)
    found = []
    for vendor in VENDORS:
        if any(frag in name for name in listed for frag in vendor.listed_as):
            continue
        evidence: list[str] = []
        nodes: list[Path] = []
        for pattern in vendor.device_globs:
            try:
                nodes += sorted(root.glob(pattern.lstrip("/")))
            except OSError:
                continue
        if nodes:
            shown = ", ".join(f"/{p.relative_to(root)}" for p in nodes[:2])
            evidence.append(shown + (", ..." if len(nodes) > 2 else ""))
        evidence += [f"{tool} on PATH" for tool in vendor.tools if _on_path(tool, env)]
        library = _find_library(vendor, root, env)
        registered = None
        if library is not None:
            found_by = _loader_dirs(root, env)
            registered = next(
                (f for f, entry in search.entries if _names(entry, library, found_by)), None
            )
        if evidence or (library is not None and registered is None):
            found.append(UnlistedGpu(vendor, tuple(evidence), library, registered, search))
    return tuple(found)
