"""The truncated path's pass stage: the row-block kernel over one draw's blocks of one grid
index, with the per-cell prefix sums and moments it reads.

:class:`BlockPass` owns the kernels of this stage and the buffers they write (the prefix sums
are the index's, kept in its :class:`~.grid_upload.DeviceIndex` per ``sigma_t``; the three
per-row outputs are this stage's): it returns each row's truncated sum and the two parts of
its bound the kernel computes (``tail``, ``ring``), in the kernel's units. The stages before
it (:mod:`.draw_index`) give the index and the blocks; the bound (:mod:`.pass_bound`) and the
assembly (:mod:`.truncated`) come after. The kernel's mathematics: ``kernels/truncated.cl``
and :mod:`.truncated`'s docstring.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from .device import DeviceEvents
from .grid_upload import DeviceBlocks, DeviceIndex
from .launch import BlocksArgs, MomentsArgs, Prefix16Args, PrefixArgs, kernel
from .opencl import LOG2E, OpenCLBackend

__all__ = ["BlockPass", "PassPoint"]


@dataclass(frozen=True)
class PassPoint:
    """Where one pass runs.

    Attributes
    ----------
    sigma_x, sigma_t : float
        The lengthscales (coordinate units, time units).
    kl
        Device buffer of each grid level's cut-off exponent.
    origin : (float, float)
        The locations' smallest x and y (the grid's corner).
    exp_mode : bool
        Exponential prefix sums (time span at most ``EXP_SPAN`` ``sigma_t``).
    weights : (sa, swd)
        The sources' amplitude and float64 weight buffers
        (:meth:`~.grid_upload.DeviceIndex.source_weights`).
    scaled : bool
        Each term weighed by its source's amplitude (``model.edge: renormalized``).
    version : int
        The amplitudes' version (the prefix sums are kept per version).
    """

    sigma_x: float
    sigma_t: float
    kl: Any
    origin: tuple[float, float]
    exp_mode: bool
    weights: tuple[Any, Any]
    scaled: bool
    version: int


class BlockPass:
    """The row-block kernel of one model on one backend's rows (module docstring).

    Parameters
    ----------
    events
        The events on the device (the targets' float64 times and locations).
    exact
        The backend's exact engine (its rows and work-group size).
    model
        1 or 2 (model 2's kernel weighs and scales each term by its source's density).
    nbase
        Number of density levels (the grid levels beyond are expansion boxes).
    """

    def __init__(self, events: DeviceEvents, exact: OpenCLBackend, model: int, nbase: int) -> None:
        self.events = events
        self.exact = exact
        self.nbase = nbase
        self.row_start = exact.row_start
        self.t0 = float(events.time[0]) if events.n else 0.0
        prog = events.program(truncated=True)
        self._k_prefix = kernel(prog, "cell_prefix")
        self._k_prefix16 = kernel(prog, "cell_prefix16")
        self._k_moments = kernel(prog, "cell_moments")
        # model 2's kernels weigh and scale each term by its density, the scaled ones also
        # by its source's amplitude (model.edge: renormalized)
        self.k_blocks = kernel(prog, "truncated_blocks" if model == 1 else "truncated_blocks2")
        self._k_scaled = kernel(prog, "truncated_scaled" if model == 1 else "truncated_scaled2")
        nrows = exact.row_stop - exact.row_start
        #: The last collected pass's outputs (:meth:`collect`), shape (rows,), float64: the
        #: truncated sums (in units of ``2^shift / norm``), the older sources' bound and the
        #: ring's (``norm`` units).
        self.e = np.empty(nrows)
        self.tail = np.empty(nrows)
        self.ring = np.empty(nrows)
        # read in place by the device's bound stage (pass_bound.DeviceBound)
        self._buf_e = events.output(self.e.nbytes, read=True)
        self._buf_tail = events.output(self.tail.nbytes, read=True)
        self._buf_ring = events.output(self.ring.nbytes, read=True)

    def launch(self, di: DeviceIndex, blocks: DeviceBlocks, at: PassPoint) -> None:
        """Start the kernel on ``blocks`` of the index ``di`` at ``at`` (``blocks`` made for an
        index of at least this cut-off) without waiting for it (the queue is flushed, so a GPU
        starts at once); :meth:`collect` reads its result."""
        self._prefix_sums(di, at)
        # one block per work-group on CPUs (PoCL schedules work-groups dynamically over the
        # cores, and blocks differ a lot in work); the configured size elsewhere
        wg = self.exact.work_group or (1 if self.events.device.info.kind == "cpu" else 64)
        blocks_kernel = self._k_scaled if at.scaled else self.k_blocks
        blocks_kernel(
            self.events.queue, (-(-max(blocks.count, 1) // wg) * wg,), (wg,),
            self._args(di, blocks, at),
        )  # fmt: skip
        self.events.queue.flush()

    @property
    def buffers(self) -> tuple[Any, Any, Any]:
        """The device buffers of the last pass's outputs ``(e, tail, ring)``, each (rows,)
        float64 (what :meth:`collect` reads; :class:`~.pass_bound.DeviceBound` reads them in
        place)."""
        return self._buf_e, self._buf_tail, self._buf_ring

    def collect(self) -> None:
        """Wait for the pass :meth:`launch` started; :attr:`e`, :attr:`tail` and :attr:`ring`
        then hold its result (rows in no block: stale values)."""
        self.events.read(self.e, self._buf_e)
        self.events.read(self.tail, self._buf_tail)
        self.events.read(self.ring, self._buf_ring)

    def _prefix_sums(self, di: DeviceIndex, at: PassPoint) -> None:
        """Per-cell and per-sub-cell prefix sums of the tail weights of ``di``, and the
        Hermite moments of its expansion boxes (exponential prefixes only), for ``sigma_t``
        and the current amplitudes (kept on the device until another ``sigma_t`` or amplitude
        comes)."""
        key = (at.sigma_t, at.version)
        if di.pre_key == key:
            return
        buf, queue = di.buffers, self.events.queue
        ncells = di.index.cell_key.size
        size = self._launch(ncells)
        common = {  # the arguments every one of the three kernels takes
            "st": buf.std,
            "sw": at.weights[1],
            "cbeg": buf.cbeg,
            "t0": self.t0,
            "inv_sigma_t": 1.0 / at.sigma_t,
        }
        prefix = {**common, "ncells": ncells, "exp_mode": int(at.exp_mode)}
        self._k_prefix(queue, *size, PrefixArgs(**prefix, pre=buf.pre))
        self._k_prefix16(queue, *size, Prefix16Args(**prefix, sq=buf.sq, pre16=buf.pre16))
        nexp = ncells - buf.mc0
        if at.exp_mode and nexp:
            moments = MomentsArgs(
                **common, enx=buf.enx, eny=buf.eny, moff=buf.moff, c0=buf.mc0, ncells=nexp,
                k0=buf.mk0, mom=buf.mom,
            )  # fmt: skip
            self._k_moments(queue, *self._launch(nexp), moments)
        di.pre_key = key

    def _args(self, di: DeviceIndex, blocks: DeviceBlocks, at: PassPoint) -> BlocksArgs:
        """The row-block kernel's arguments (the one place they are made)."""
        ev, buf = self.events, di.buffers
        kt, ktl = ev.coefficient(LOG2E / at.sigma_t)
        kx, kxr = ev.coefficient(LOG2E / (2.0 * at.sigma_x * at.sigma_x), relative=True)
        return BlocksArgs(
            td=ev.buf_td,
            xd=ev.buf_xd,
            yd=ev.buf_yd,
            st=buf.st,
            sxr=buf.sxr,
            syr=buf.syr,
            sw=buf.sw,
            sa=at.weights[0],
            std=buf.std,
            pre=buf.pre,
            pre16=buf.pre16,
            mom=buf.mom,
            moff=buf.moff,
            mc0=buf.mc0,
            ckey=buf.ckey,
            cbeg=buf.cbeg,
            cdlo=buf.cdlo,
            cdhi=buf.cdhi,
            loff=buf.loff,
            hs=buf.hs,
            dlo=buf.dlo,
            nlevels=di.index.h.size,  # grid levels: density levels and expansion levels
            nbase=self.nbase,  # density levels
            x0=at.origin[0],
            y0=at.origin[1],
            brow=blocks.rows,
            nblocks=blocks.count,
            row0=self.row_start,
            bmask=blocks.near,
            kt=kt,
            kx=kx,
            ktl=ktl,
            kxr=kxr,
            shift=ev.real(ev.shift),
            kl=at.kl,
            sigma_t=at.sigma_t,
            vscale=1.0 / (2.0 * at.sigma_x * at.sigma_x),
            t0=self.t0,
            inv_sigma_t=1.0 / at.sigma_t,
            exp_mode=int(at.exp_mode),
            out_e=self._buf_e,
            out_tail=self._buf_tail,
            out_ring=self._buf_ring,
        )

    def _launch(self, items: int) -> tuple[tuple[int], tuple[int] | None]:
        """(global, local) sizes of a one-work-item-per-item launch at the backend's
        work-group size (the implementation's choice when none is set)."""
        g, local = self.exact.launch_size(items)
        return (g,), local
