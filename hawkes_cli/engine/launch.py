"""Kernel arguments as typed records: one frozen dataclass per kernel signature of ``kernels/*.cl``.

A record's fields are its kernel's parameters, with the same names in the same order; a field's
annotation says how its value reaches the device:

- ``Buffer``: a ``__global`` pointer (a :class:`pyopencl.Buffer`), passed as it is;
- ``int``: ``const int``, passed as :class:`numpy.int32`;
- ``float``: ``const double``, passed as :class:`numpy.float64`;
- ``Real``: ``const real``, a scalar of the working precision (``float`` or ``double``), already
  converted by the caller (:attr:`~hawkes_cli.engine.device.DeviceEvents.real`).

:func:`kernel` takes a kernel out of a program with the record type of its name
(:data:`KERNEL_ARGS`), and the :class:`Kernel` it returns accepts nothing else, so a launch
cannot pass one kernel's arguments to another. ``tests/test_opencl.py`` parses every kernel's
signature in ``kernels/*.cl`` and compares it with its record, name by name and kind by kind:
an argument added, moved or renamed on one side only fails there.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from . import profile

#: A ``__global`` pointer argument: a :class:`pyopencl.Buffer`.
Buffer = Any
#: A ``const real`` argument: :class:`numpy.float32` or :class:`numpy.float64`, as the program.
Real = np.floating

_CONVERT = {"Buffer": None, "Real": None, "int": np.int32, "float": np.float64}


class KernelArgs:
    """Base of the argument records: :meth:`values` in the kernel's order."""

    def values(self) -> tuple[Any, ...]:
        """Every field in order, ``int`` and ``float`` fields as :class:`numpy.int32` and
        :class:`numpy.float64` (the kernel's ``const int`` and ``const double``)."""
        return tuple(
            getattr(self, name) if conv is None else conv(getattr(self, name))
            for name, conv in _converters(type(self))
        )


@cache
def _converters(cls: type) -> tuple[tuple[str, Any], ...]:
    """``(field name, converter or None)`` of a record, in field order (its annotations are the
    strings of :data:`_CONVERT`; anything else is a mistake in this module)."""
    return tuple((f.name, _CONVERT[str(f.type)]) for f in dataclasses.fields(cls))


def argument_kinds(cls: type) -> tuple[tuple[str, str], ...]:
    """``(name, kind)`` of each field of an argument record, kind one of ``Buffer``, ``int``,
    ``float``, ``Real`` (what ``tests/test_opencl.py`` compares with the kernel source)."""
    return tuple((f.name, str(f.type)) for f in dataclasses.fields(cls))


# --------------------------------------------------------------------------- hawkes.cl
@dataclass(frozen=True)
class TriggerArgs(KernelArgs):
    """``trigger_model1``, ``trigger_model2``, ``trigger_scaled1``, ``trigger_scaled2`` (rows
    ``row0 ..``; the scaled ones weight each source by its amplitude ``a``, the others do not
    read it) and ``trigger_sample1``, ``trigger_sample2``, ``trigger_scaled_sample1``,
    ``trigger_scaled_sample2`` (the rows listed in ``sample``): exact trigger sums, one per
    row."""

    t: Buffer
    x: Buffer
    y: Buffer
    xl: Buffer
    yl: Buffer
    w: Buffer
    a: Buffer
    lo: Buffer
    sample: Buffer
    row0: int
    nrows: int
    kt: Real
    kx: Real
    ktl: Real
    kxr: Real
    shift: Real
    out: Buffer


@dataclass(frozen=True)
class BackgroundArgs(KernelArgs):
    """``background``: the background once per distinct time."""

    tu: Buffer
    c: Buffer
    nu: int
    row0: int
    nrows: int
    kb: Real
    kbl: Real
    shift: Real
    out: Buffer


@dataclass(frozen=True)
class BackgroundPairsArgs(KernelArgs):
    """``background_pairs``: the background as the plain pair sum."""

    t: Buffer
    n: int
    lo: Buffer
    hi: Buffer
    row0: int
    nrows: int
    kb: Real
    kbl: Real
    shift: Real
    out: Buffer


@dataclass(frozen=True)
class RowSumsArgs(KernelArgs):
    """``row_sums``: an evaluation's per-row sums, the background from its time lattice."""

    cell: Buffer
    frac: Buffer
    extra: Buffer
    tq: Buffer
    conv: Buffer
    bu: Buffer
    bv: Buffer
    e: Buffer
    omega: Buffer
    rel: Buffer
    rows: int
    lanes: int
    exact: int
    has_omega: int
    has_rel: int
    shift_r: int
    norm: float
    g1: float
    m0: float
    bscale: float
    mu0: float
    xi0: float
    lam_floor: float
    out: Buffer


@dataclass(frozen=True)
class DrawPointsArgs(KernelArgs):
    """``draw_points``: one uniform point in each event's polygon from three uniforms each (the
    location redraw, :mod:`hawkes_cli.engine.point_draw`)."""

    r: Buffer
    code: Buffer
    offsets: Buffer
    key: Buffer
    tri: Buffer
    n: int
    padded_n: int
    xd: Buffer
    yd: Buffer
    xh: Buffer
    yh: Buffer
    xl: Buffer
    yl: Buffer


@dataclass(frozen=True)
class IndexSourcesArgs(KernelArgs):
    """``index_sources``: a grid index's sources in its sorted order, from the float64 copies
    on the device (:func:`hawkes_cli.engine.grid_upload.upload_index`)."""

    order: Buffer
    level: Buffer
    hs: Buffer
    ih: Buffer
    td: Buffer
    xd: Buffer
    yd: Buffer
    wd: Buffer
    x0: float
    y0: float
    n: int
    padded_n: int
    mk0: int
    st: Buffer
    sxr: Buffer
    syr: Buffer
    sw: Buffer
    std: Buffer
    swd: Buffer
    sq: Buffer
    enx: Buffer
    eny: Buffer


@dataclass(frozen=True)
class RasterMassArgs(KernelArgs):
    """``raster_mass``: the trigger mass inside the study region of the rows ``pick`` (indices
    from ``row0``; ``rows`` of them) read from their counties' tile rasters behind the distance
    screen (:mod:`hawkes_cli.engine.region_groups_device`)."""

    x: Buffer
    y: Buffer
    row0: int
    rows: int
    pick: Buffer
    tile: Buffer
    frac: Buffer
    geom: Buffer
    shape: Buffer
    upper: Buffer
    raster: Buffer
    bound: Buffer
    bnx: int
    bny: int
    bx0: float
    by0: float
    bh: float
    field_error: float
    out0: int
    mass: Buffer
    err: Buffer


@dataclass(frozen=True)
class TakeRowsArgs(KernelArgs):
    """``take_rows``: the host's rows out of the device's masses at several lattice points
    (:mod:`hawkes_cli.engine.edge_lost_device`), their masses there then set to 1."""

    mass: Buffer
    err: Buffer
    rows: int
    npoints: int
    idx: Buffer
    count: int
    out_m: Buffer
    out_e: Buffer


@dataclass(frozen=True)
class EdgeLostArgs(KernelArgs):
    """``edge_lost``: the compensator's sums of the trigger mass the rows lose outside the
    region and of its error scale, per lane (:mod:`hawkes_cli.engine.edge_lost_device`)."""

    rows: int
    lanes: int
    npoints: int
    pick: Buffer
    mass: Buffer
    offset: Buffer
    has_offset: int
    shift: float
    tail: Buffer
    sigma_t: float
    field_error: float
    interpolation_error: float
    out: Buffer


@dataclass(frozen=True)
class BlockLevelsArgs(KernelArgs):
    """``block_levels``: which levels have a source within reach of each row block
    (:func:`hawkes_cli.engine.grid.block_levels` on the device)."""

    blocks: Buffer
    count: int
    x: Buffer
    y: Buffer
    sat: Buffer
    nlev: int
    cells: int
    x0: float
    y0: float
    g: float
    pad: Buffer
    near: Buffer


@dataclass(frozen=True)
class PresenceCountArgs(KernelArgs):
    """``presence_count``: each source counted in its level's presence cell (atomic)."""

    x: Buffer
    y: Buffer
    level: Buffer
    n: int
    cells: int
    x0: float
    y0: float
    g: float
    sat: Buffer


@dataclass(frozen=True)
class PresenceScanArgs(KernelArgs):
    """``presence_scan``: the counts into summed-area tables, along rows (axis 0) then
    columns (axis 1)."""

    sat: Buffer
    nlev: int
    cells: int
    axis: int


# --------------------------------------------------------------------------- truncated.cl
@dataclass(frozen=True)
class PrefixArgs(KernelArgs):
    """``cell_prefix``: per-cell prefix sums of the tail weights."""

    st: Buffer
    sw: Buffer
    cbeg: Buffer
    ncells: int
    t0: float
    inv_sigma_t: float
    exp_mode: int
    pre: Buffer


@dataclass(frozen=True)
class Prefix16Args(KernelArgs):
    """``cell_prefix16``: the same per 4 x 4 sub-cell."""

    st: Buffer
    sw: Buffer
    sq: Buffer
    cbeg: Buffer
    ncells: int
    t0: float
    inv_sigma_t: float
    exp_mode: int
    pre16: Buffer


@dataclass(frozen=True)
class MomentsArgs(KernelArgs):
    """``cell_moments``: prefix Hermite moments of the expansion boxes."""

    st: Buffer
    sw: Buffer
    enx: Buffer
    eny: Buffer
    cbeg: Buffer
    moff: Buffer
    c0: int
    ncells: int
    k0: int
    t0: float
    inv_sigma_t: float
    mom: Buffer


@dataclass(frozen=True)
class BlocksArgs(KernelArgs):
    """``truncated_blocks`` (model 1) and ``truncated_blocks2`` (model 2): the truncated
    trigger of row blocks and the bound of what it omits (``kernels/truncated.cl``); with each
    source's amplitude ``sa`` (sorted like ``sw``), ``truncated_scaled`` and
    ``truncated_scaled2`` (``sa`` is unread by the others)."""

    td: Buffer
    xd: Buffer
    yd: Buffer
    st: Buffer
    sxr: Buffer
    syr: Buffer
    sw: Buffer
    sa: Buffer
    std: Buffer
    pre: Buffer
    pre16: Buffer
    mom: Buffer
    moff: Buffer
    mc0: int
    ckey: Buffer
    cbeg: Buffer
    cdlo: Buffer
    cdhi: Buffer
    loff: Buffer
    hs: Buffer
    dlo: Buffer
    nlevels: int
    nbase: int
    x0: float
    y0: float
    brow: Buffer
    nblocks: int
    row0: int
    bmask: Buffer
    kt: Real
    kx: Real
    ktl: Real
    kxr: Real
    shift: Real
    kl: Buffer
    sigma_t: float
    vscale: float
    t0: float
    inv_sigma_t: float
    exp_mode: int
    out_e: Buffer
    out_tail: Buffer
    out_ring: Buffer


@dataclass(frozen=True)
class FarChunksArgs(KernelArgs):
    """``far_chunks``: each chunk's sum of the far sums' terms ``g`` (kept in ``g``)."""

    td: Buffer
    w: Buffer
    lvl: Buffer
    lfac: Buffer
    n: int
    chunk: int
    t0: float
    inv_sigma_t: float
    g: Buffer
    tot: Buffer


@dataclass(frozen=True)
class FarOffsetsArgs(KernelArgs):
    """``far_offsets``: the chunks' sums into exclusive prefixes (one work-item)."""

    tot: Buffer
    nchunks: int


@dataclass(frozen=True)
class FarPrefixArgs(KernelArgs):
    """``far_prefix``: the exclusive prefix sums ``cum`` of ``g`` (n + 1 values)."""

    g: Buffer
    tot: Buffer
    n: int
    chunk: int
    cum: Buffer


@dataclass(frozen=True)
class PassBoundArgs(KernelArgs):
    """``pass_bound``: a truncated pass's ``E~`` and ``omega`` from the row-block kernel's
    outputs and the far sums' prefixes."""

    e: Buffer
    tail: Buffer
    ring: Buffer
    cum: Buffer
    lo: Buffer
    td: Buffer
    row0: int
    rows: int
    with_ring: int
    t0: float
    inv_sigma_t: float
    escale: float
    norm: float
    safety: float
    out_e: Buffer
    out_omega: Buffer


#: The argument record of every kernel in ``kernels/*.cl``, by kernel name.
KERNEL_ARGS: dict[str, type[KernelArgs]] = {
    "trigger_model1": TriggerArgs,
    "trigger_model2": TriggerArgs,
    "trigger_scaled1": TriggerArgs,
    "trigger_scaled2": TriggerArgs,
    "trigger_sample1": TriggerArgs,
    "trigger_sample2": TriggerArgs,
    "trigger_scaled_sample1": TriggerArgs,
    "trigger_scaled_sample2": TriggerArgs,
    "background": BackgroundArgs,
    "background_pairs": BackgroundPairsArgs,
    "row_sums": RowSumsArgs,
    "draw_points": DrawPointsArgs,
    "index_sources": IndexSourcesArgs,
    "raster_mass": RasterMassArgs,
    "take_rows": TakeRowsArgs,
    "edge_lost": EdgeLostArgs,
    "block_levels": BlockLevelsArgs,
    "presence_count": PresenceCountArgs,
    "presence_scan": PresenceScanArgs,
    "cell_prefix": PrefixArgs,
    "cell_prefix16": Prefix16Args,
    "cell_moments": MomentsArgs,
    "truncated_blocks": BlocksArgs,
    "truncated_blocks2": BlocksArgs,
    "truncated_scaled": BlocksArgs,
    "truncated_scaled2": BlocksArgs,
    "far_chunks": FarChunksArgs,
    "far_offsets": FarOffsetsArgs,
    "far_prefix": FarPrefixArgs,
    "pass_bound": PassBoundArgs,
}


@dataclass(frozen=True, eq=False)
class Kernel:
    """One kernel of a built program, launched only with its own argument record.

    A kernel object holds its arguments between launches, so each backend keeps its own.
    """

    name: str
    handle: Any

    def __call__(
        self,
        queue: Any,
        global_size: tuple[int, ...],
        local_size: tuple[int, ...] | None,
        args: KernelArgs,
    ) -> None:
        """Enqueue the kernel over ``global_size`` work-items in work-groups of
        ``local_size`` (None: the implementation's choice) with ``args``.

        Raises
        ------
        TypeError
            ``args`` is not this kernel's record (:data:`KERNEL_ARGS`).
        """
        want = KERNEL_ARGS[self.name]
        if type(args) is not want:
            raise TypeError(f"kernel {self.name} takes {want.__name__}, got {type(args).__name__}")
        event = self.handle(queue, global_size, local_size, *args.values())
        profile.launched(self.name, event)


def kernel(program: Any, name: str) -> Kernel:
    """The kernel ``name`` of ``program`` (one of :data:`KERNEL_ARGS`)."""
    import pyopencl as cl

    if name not in KERNEL_ARGS:
        raise KeyError(f"no argument record for kernel {name!r}")
    return Kernel(name, cl.Kernel(program, name))
