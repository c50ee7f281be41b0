"""One OpenCL device and the events uploaded to it, shared by the OpenCL backends.

:class:`Device` is the device a likelihood drives with its context and command queue, chosen
once per process, spec and slot (:meth:`Device.select`: by the Slurm rank's device check and
by :func:`hawkes_cli.engine.build_likelihood`, which are handed the same device).
:class:`DeviceEvents` holds the events uploaded to it at one working precision, with the
padding the kernels rely on, and builds the programs that read them; the exact backend
(:mod:`~hawkes_cli.engine.opencl`) and the truncated one (:mod:`~hawkes_cli.engine.truncated`)
are both built on one such object and share its buffers.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import kernels
from ..vocab import PRECISIONS
from . import profile
from .times import TimeStructure

log = logging.getLogger(__name__)

#: Sources per vector step of the kernels; event arrays are padded to a multiple of this, plus
#: one more step, so the last aligned 8-wide load stays inside the buffer.
VEC = 8
#: Work-items of an item-wise launch are a multiple of this (:func:`item_range`).
ITEM_ROUND = 256
#: Most events per chain: indices and counts are int32 and float32 in the kernels.
MAX_EVENTS = 2**24 - 1
#: A float64 pattern every new output buffer is filled with before any kernel runs (None:
#: left undefined, as OpenCL allocates it). Only tests set it.
POISON: float | None = None
#: Grid of an exponent coefficient's leading part (:meth:`DeviceEvents.coefficient`): float32
#: holds every multiple of 2^-18 below 2^6, which bounds the shift (60) and the exponents that
#: matter.
COEFFICIENT_GRID = 2.0**-18


@dataclass(frozen=True)
class LocationBuffers:
    """All N locations on the device in every form the kernels read: ``xd``, ``yd`` float64
    (N values), ``xh``, ``yh`` the working precision padded with 0 (:func:`padded`) and, in
    float32, ``xl``, ``yl`` the remainders ``x - xh`` (in float64 they alias ``xh``, ``yh``)."""

    xd: Any
    yd: Any
    xh: Any
    yh: Any
    xl: Any
    yl: Any


def padded(values: np.ndarray, dtype: Any, fill: float) -> np.ndarray:
    """``values`` as ``dtype``, padded with ``fill`` to ``ceil(N / VEC) * VEC + VEC`` elements."""
    n = values.size
    out = np.full(((n + VEC - 1) // VEC) * VEC + VEC, fill, dtype=dtype)
    out[:n] = values
    return out


def item_range(items: int) -> tuple[int]:
    """Global size of a one-work-item-per-item launch whose kernel checks its bound: ``items``
    rounded up to a multiple of :data:`ITEM_ROUND`, so that an implementation choosing the
    work-group size can choose a full one (a global size of 1,000,008 = 8 x 125,001 divides
    only into groups of 8 or fewer; PoCL on 2 cores ran both sizes equally fast)."""
    return (max(-(-items // ITEM_ROUND) * ITEM_ROUND, ITEM_ROUND),)


def launch_size(rows: int, work_group: int | None) -> tuple[int, tuple[int] | None]:
    """(global size, local size) of a one-work-item-per-row launch over ``rows`` rows: the
    rows rounded up to whole work-groups, or the implementation's choice when ``None``."""
    if work_group is None:
        return max(rows, 1), None
    return max(-(-rows // work_group) * work_group, work_group), (work_group,)


#: The devices this process has chosen, by (spec, slot) (:meth:`Device.select`).
_CHOSEN: dict[tuple[str | None, int], Device] = {}


@dataclass(frozen=True, eq=False)
class Device:
    """The OpenCL device of one likelihood.

    Attributes
    ----------
    info : hawkes_cli.kernels.DeviceInfo
        What was chosen (platform and device indices, name, kind).
    context : pyopencl.Context
        The process's context on the device (shared, so programs are built once).
    queue : pyopencl.CommandQueue
        The in-order queue every pass of the likelihood enqueues on.
    """

    info: kernels.DeviceInfo
    context: Any
    queue: Any

    @classmethod
    def select(cls, spec: str | None = None, slot: int = 0) -> Device:
        """The device for ``spec`` and ``slot``, chosen once per process.

        The first call for a spec (:func:`hawkes_cli.kernels.device_spec`: the environment
        fills in a None) and slot chooses the device
        (:func:`hawkes_cli.kernels.select_device`, which takes the ``slot``-th of the matching
        devices, modulo their number), checks its float64 support and buffer alignment and
        opens a queue on it; every later call returns that same device. So the choice a Slurm
        rank makes and checks against the other ranks of its node
        (:func:`hawkes_cli.slurm.devices.choose_device`, which pins its slot on the chain's
        communicator) is the device its likelihoods drive: the engine asks again with the same
        spec and slot (:func:`hawkes_cli.parallel.local_rank`) and is handed it, nothing is
        chosen twice.

        Parameters
        ----------
        spec
            ``engine.device`` (see :func:`~hawkes_cli.kernels.select_device`).
        slot
            Which of the matching devices: the rank's slot on its node.

        Raises
        ------
        hawkes_cli.errors.DeviceError
            No matching device, or one without float64 or aligning buffers too loosely.
        """
        import pyopencl as cl

        key = (kernels.device_spec(spec), slot)
        chosen = _CHOSEN.get(key)
        if chosen is None:
            info, dev = kernels.select_device(spec, slot)
            kernels.require_float64(info)
            kernels.require_alignment(info)
            context = kernels.device_context(dev)
            queue = cl.CommandQueue(context, properties=profile.queue_properties(cl))
            chosen = cls(info=info, context=context, queue=queue)
            _CHOSEN[key] = chosen
        return chosen


class DeviceEvents:
    """Events sorted by time, uploaded once to a :class:`Device` at one working precision.

    Parameters
    ----------
    device
        Where the buffers live.
    time, x, y : (N,) float64
        Events sorted by time (time units; coordinate units).
    density : (N,) float64 or None
        Persons per square mile (model 2), or None.
    precision
        Working precision of the pair terms, one of :data:`hawkes_cli.vocab.PRECISIONS`.
    times
        The tie structure of ``time`` (built here when None).

    Attributes
    ----------
    device : Device
    precision : str
    real : type
        ``np.float32`` or ``np.float64``, the working precision.
    shift : float
        Exponent shift (log2 units) keeping small float32 terms above underflow (hawkes.cl);
        0 in float64. Kernel outputs carry a factor ``2**shift``.
    n : int
        Number of events N.
    times : TimeStructure
    time, weight : (N,) float64
        Host copies of the times and of ``density`` (ones when None).
    density : (N,) float64 or None
    x, y : (N,) float64
        Host copies of the current locations.
    buf_t, buf_w, buf_x, buf_y, buf_xl, buf_yl : pyopencl.Buffer
        Times, weights and locations in the working precision, padded (:func:`padded`) with
        the last time, 0, 0, 0. In float32 a location is split in two parts ``x = xh + xl``
        (``buf_xl``, ``buf_yl``); in float64 those alias ``buf_x``, ``buf_y``.
    buf_lo : pyopencl.Buffer
        ``times.lo`` as int32 (first index of each tie group).
    buf_tu, buf_c : pyopencl.Buffer
        Distinct times and their counts in the working precision, padded with the last
        distinct time and 0.
    amplitude : (N,) float64 or None
        Each source's amplitude ``a_m`` (``model.edge: renormalized``: ``1 / M_m``), set by
        :meth:`set_amplitude`; None: every source 1.
    buf_a : pyopencl.Buffer or None
        ``amplitude`` in the working precision, padded with 0; None when ``amplitude`` is.
    buf_td, buf_xd, buf_yd : pyopencl.Buffer or None
        Times and locations in float64, unpadded; uploaded by :meth:`keep_float64_copies`
        (the truncated trigger's cell searches), else None.
    """

    def __init__(
        self,
        device: Device,
        time: np.ndarray,
        x: np.ndarray,
        y: np.ndarray,
        density: np.ndarray | None,
        *,
        precision: str,
        times: TimeStructure | None = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        t = np.asarray(time, dtype=np.float64)
        n = t.size
        if n > MAX_EVENTS:
            raise ValueError(f"at most {MAX_EVENTS} events per chain, got {n}")
        self.device = device
        self.precision = precision
        self.real: Any = np.float64 if precision == "float64" else np.float32
        self.shift = 0.0 if precision == "float64" else 60.0
        self.n = n
        self.times = TimeStructure.from_times(t) if times is None else times
        self.time = t
        self.density = None if density is None else np.asarray(density, dtype=np.float64)
        self.weight = np.ones(n) if self.density is None else self.density
        self._programs: dict[bool, Any] = {}
        real, ts = self.real, self.times
        self.buf_t = self.upload(padded(t, real, t[-1]))
        self.buf_lo = self.upload(ts.lo.astype(np.int32))
        self.buf_w = self.upload(padded(self.weight, real, 0.0))
        self.buf_tu = self.upload(padded(ts.unique, real, ts.unique[-1]))
        self.buf_c = self.upload(padded(ts.counts.astype(np.float64), real, 0.0))
        self.buf_td: Any = None
        self.buf_xd: Any = None
        self.buf_yd: Any = None
        self.amplitude: np.ndarray | None = None
        self.buf_a: Any = None
        self._drawn: tuple[np.ndarray, np.ndarray, LocationBuffers] | None = None
        self.set_locations(x, y)

    @property
    def context(self) -> Any:
        """The device's OpenCL context."""
        return self.device.context

    @property
    def queue(self) -> Any:
        """The device's command queue."""
        return self.device.queue

    def coefficient(self, value: float, *, relative: bool = False) -> tuple[Any, Any]:
        """An exponent coefficient (``log2(e) / sigma_t`` and the like, > 0) exactly enough
        for the kernels' ``EXPONENT`` (``hawkes.cl``), as two numbers of the working precision.

        Default: ``(hi, lo)``, ``hi + lo ~ value``, ``hi`` rounded to a multiple of
        :data:`COEFFICIENT_GRID` (while that is exact), so that on a day lattice ``dt * hi``
        and ``shift - dt * hi`` are exact. ``relative``: ``(hi, rel)``, ``hi`` the nearest
        number and ``rel = value / hi - 1`` its rounding, for a coefficient of a continuous
        quantity. Without them every pair with the same ``dt`` shares a rounding (of the
        coefficient, or after adding the shift), which biased every row's sum alike in float32:
        about 1e-7 relative, 0.01 nats of log-likelihood differences at 200,000 events."""
        if relative:
            hi = self.real(value)
            return hi, self.real(value / float(hi) - 1.0)
        hi = self.real(round(value / COEFFICIENT_GRID) * COEFFICIENT_GRID)
        return hi, self.real(value - float(hi))

    def upload(self, host: np.ndarray) -> Any:
        """A read-only device copy of ``host`` (one zero element when empty)."""
        import pyopencl as cl

        host = np.ascontiguousarray(host)
        if host.nbytes == 0:
            host = np.zeros(1, dtype=host.dtype)
        mf = cl.mem_flags
        profile.uploaded(host.nbytes)
        return cl.Buffer(self.context, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=host)

    def write(self, buf: Any, host: np.ndarray) -> None:
        """Copy ``host`` (contiguous) into the existing device buffer ``buf`` (at least its
        size), in queue order (counted by :mod:`.profile` as an upload)."""
        import pyopencl as cl

        cl.enqueue_copy(self.queue, buf, np.ascontiguousarray(host))
        profile.uploaded(host.nbytes)

    def read(self, host: np.ndarray, buf: Any) -> None:
        """Copy ``buf`` into ``host`` (contiguous, its size in bytes), waiting for the queue:
        every result the host reads comes through here (counted by :mod:`.profile`)."""
        import pyopencl as cl

        cl.enqueue_copy(self.queue, host, buf)
        profile.read_back(host.nbytes)

    def read_later(self, host: np.ndarray, buf: Any) -> Any:
        """Start copying ``buf`` into ``host`` (as :meth:`read`) without waiting; returns the
        copy's event. ``host`` must not be touched until the event is complete."""
        import pyopencl as cl

        event = cl.enqueue_copy(self.queue, host, buf, is_blocking=False)
        profile.read_back(host.nbytes, sync=False)
        return event

    def output(self, nbytes: int, *, read: bool = False) -> Any:
        """A device buffer of ``nbytes`` bytes (at least 8) the kernels write (and, with
        ``read``, also read). Its contents are undefined until a kernel writes them; with
        :data:`POISON` set every new one is first filled with that float64 value (tests: a
        result that changes with the poison read memory no kernel wrote)."""
        import pyopencl as cl

        flags = cl.mem_flags.READ_WRITE if read else cl.mem_flags.WRITE_ONLY
        nbytes = max(8, -(-int(nbytes) // 8) * 8)
        buf = cl.Buffer(self.context, flags, nbytes)
        if POISON is not None:
            cl.enqueue_fill_buffer(self.queue, buf, np.float64(POISON), 0, nbytes)
        return buf

    def zeroed(self, nbytes: int) -> Any:
        """A device buffer of ``nbytes`` bytes (a multiple of 4) holding zeros, which the
        kernels read and write (counts they add to). Copied from a host array of zeros, not
        filled on the device: Oclgrind 21.10 takes ``clEnqueueFillBuffer``'s bytes for
        uninitialised."""
        import pyopencl as cl

        host = np.zeros(max(int(nbytes), 4) // 4, dtype=np.int32)
        profile.uploaded(host.nbytes)
        return cl.Buffer(
            self.context, cl.mem_flags.READ_WRITE | cl.mem_flags.COPY_HOST_PTR, hostbuf=host
        )

    def program(self, truncated: bool = False) -> Any:
        """The program at this precision (``hawkes.cl``, plus ``truncated.cl`` when
        ``truncated``), built once per process and recorded for :attr:`kernel_fingerprint`."""
        prog = self._programs.get(truncated)
        if prog is None:
            prog = kernels.build_program(self.context, self.precision, truncated=truncated)
            self._programs[truncated] = prog
        return prog

    @property
    def kernel_fingerprint(self) -> str:
        """SHA-256 (hex) of every source and build option of the programs built so far
        (:func:`hawkes_cli.kernels.kernel_fingerprint`)."""
        return kernels.kernel_fingerprint((self.precision, tr) for tr in self._programs)

    def keep_float64_copies(self) -> None:
        """Upload (once) float64 copies of times and locations, kept current by
        :meth:`set_locations`: ``buf_td``, ``buf_xd``, ``buf_yd``."""
        if self.buf_td is None:
            self.buf_td = self.upload(self.time)
            self.buf_xd = self.upload(self.x)
            self.buf_yd = self.upload(self.y)

    def set_amplitude(self, amplitude: np.ndarray | None) -> None:
        """Upload each source's amplitude ``a_m`` (shape (N,), finite, > 0), or drop it (None:
        every source 1): the exact trigger kernels weight source m's terms by it."""
        if amplitude is None:
            self.amplitude = self.buf_a = None
            return
        a = np.asarray(amplitude, dtype=np.float64)
        if a.shape != (self.n,):
            raise ValueError(f"amplitude must have shape ({self.n},), got {a.shape}")
        self.amplitude = a
        self.buf_a = self.upload(padded(a, self.real, 0.0))

    def drawn_on_device(self, x: np.ndarray, y: np.ndarray, buffers: LocationBuffers) -> None:
        """Locations a kernel of this device drew (:mod:`.point_draw`): ``x``, ``y`` (host
        copies, shape (N,) float64) and ``buffers`` already hold them in every form
        :meth:`set_locations` uploads, so the next :meth:`set_locations` with these two very
        arrays takes the buffers instead of uploading (any other arrays are uploaded)."""
        self._drawn = (x, y, buffers)

    def set_locations(self, x: np.ndarray, y: np.ndarray) -> None:
        """Upload new locations for all N events (every location buffer; see hawkes.cl for
        the two-part float32 form), or take those a device draw left for them
        (:meth:`drawn_on_device`)."""
        drawn, self._drawn = self._drawn, None
        if drawn is not None and drawn[0] is x and drawn[1] is y:
            self.x, self.y, b = x, y, drawn[2]
            self.buf_x, self.buf_y, self.buf_xl, self.buf_yl = b.xh, b.yh, b.xl, b.yl
            if self.buf_td is not None:
                self.buf_xd, self.buf_yd = b.xd, b.yd
            return
        self.x = np.asarray(x, dtype=np.float64)
        self.y = np.asarray(y, dtype=np.float64)
        real = self.real
        xh, yh = self.x.astype(real), self.y.astype(real)
        self.buf_x = self.upload(padded(xh, real, 0.0))
        self.buf_y = self.upload(padded(yh, real, 0.0))
        if real is np.float32:
            self.buf_xl = self.upload(padded((self.x - xh).astype(real), real, 0.0))
            self.buf_yl = self.upload(padded((self.y - yh).astype(real), real, 0.0))
        else:  # unused by the float64 build
            self.buf_xl, self.buf_yl = self.buf_x, self.buf_y
        if self.buf_td is not None:
            self.buf_xd = self.upload(self.x)
            self.buf_yd = self.upload(self.y)
