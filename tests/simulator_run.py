"""Run one kernel case on a named OpenCL device and print what it computed, as JSON.

``python -m tests.simulator_run --device oclgrind --engine truncated --model 2 --precision
float32`` evaluates the case at work-group sizes 1 and the largest every kernel of it allows
(and the implementation's choice), compares each with the float64 reference
(:mod:`hawkes_cli.engine.selfcheck`'s data and tolerances) and prints one JSON object on
stdout. The simulator tier (``tests/test_simulator.py``) runs it in a child process under
Oclgrind, whose reports go to standard error.
"""

from __future__ import annotations

import argparse
import json

import numpy as np

from hawkes_cli.engine import opencl
from hawkes_cli.engine.device import Device, DeviceEvents
from hawkes_cli.engine.opencl import OpenCLBackend
from hawkes_cli.engine.reference import ReferenceBackend
from hawkes_cli.engine.selfcheck import (
    CHECK_AREA,
    CHECK_KAPPA,
    CHECK_PARAMS,
    CHECK_ROUNDING,
    check_amplitude,
    check_events,
    relative_excess,
    truncated_excess,
)
from hawkes_cli.engine.times import TimeStructure
from hawkes_cli.engine.truncated import TruncatedBackend


def _max_local(backend, names: list[str]) -> int:
    """The largest work-group size every kernel in ``names`` allows on the backend's device."""
    import pyopencl as cl

    ev = backend.events
    dev = ev.context.devices[0]
    prog = ev.program(truncated=isinstance(backend, TruncatedBackend))
    sizes = [
        cl.Kernel(prog, k).get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, dev)
        for k in names
    ]
    return int(min([*sizes, dev.max_work_group_size]))


def run(
    device: str, engine: str, model: int, precision: str, n: int, *, only_one: bool = False
) -> dict:
    """Evaluate the case at several work-group sizes (``only_one``: at 1 only); see the
    module docstring."""
    opencl.HOST_BACKGROUND = 0  # float32 too: the background kernel on the device
    t, x, y, d = check_events(n)
    density = d if model == 2 else None
    times = TimeStructure.from_times(t)
    p = CHECK_PARAMS
    ref = ReferenceBackend(t, x, y, density, model=model, area=CHECK_AREA, times=times)
    e0, b0 = ref.trigger(p.sigma_x, p.sigma_t), ref.background(p.tau_t)
    # model.edge: renormalized's per-source amplitudes (the scaled kernels)
    amplitude = check_amplitude(t.size)
    ref.set_amplitude(amplitude)
    e0_scaled = ref.trigger(p.sigma_x, p.sigma_t)
    dev = Device.select(device)
    r = CHECK_ROUNDING[precision]
    out: dict = {"device": dev.info.name, "runs": []}

    def build(wg):
        events = DeviceEvents(dev, t, x, y, density, precision=precision, times=times)
        common = {"model": model, "area": CHECK_AREA, "work_group": wg}
        if engine == "exact":
            return OpenCLBackend(events, **common)
        return TruncatedBackend(events, kappa=CHECK_KAPPA, **common)

    blocks = "truncated_blocks2" if model == 2 else "truncated_blocks"
    scaled_blocks = "truncated_scaled2" if model == 2 else "truncated_scaled"
    names = (
        [f"trigger_model{model}", f"trigger_scaled{model}", "background"]
        if engine == "exact"
        else ["cell_prefix", "cell_prefix16", "cell_moments", blocks, scaled_blocks]
    )
    # Only where a larger size runs: Oclgrind's uninitialised-value plugin then reports the
    # row-block kernel's out_e rows 756-1499 as uninitialised when pass_bound reads them (n
    # 1500, model 1, float32), although every row is written (a poisoned buffer comes back
    # without a poisoned row) and E~ is e escale bit for bit; without these query-only kernel
    # objects on another program it reports nothing.
    largest = 1 if only_one else _max_local(build(None), names)
    out["largest"] = largest
    for wg in (1,) if only_one else (1, largest, None):
        be = build(wg)
        run_out: dict = {"work_group": wg}
        if engine == "exact":
            e = be.trigger(p.sigma_x, p.sigma_t)
            b = be.background(p.tau_t)
            be.set_amplitude(amplitude)
            scaled = be.trigger(p.sigma_x, p.sigma_t)
            run_out["worst"] = max(
                relative_excess(e, e0, r),
                relative_excess(b, b0, r),
                relative_excess(scaled, e0_scaled, r),
            )
            run_out["b"] = b.tolist()
        else:
            e, omega = be.trigger_bounded(p.sigma_x, p.sigma_t)
            di = be._draw.index(p.sigma_x, be.kappa)
            be.set_amplitude(amplitude)  # the scaled row blocks and self-check rows
            scaled, scaled_omega = be.trigger_bounded(p.sigma_x, p.sigma_t)
            run_out["worst"] = max(
                truncated_excess(e, omega, e0, r),
                truncated_excess(scaled, scaled_omega, e0_scaled, r),
            )
            run_out["scaled"] = scaled.tolist()
            run_out["check_failure"] = be.check_failure
            run_out["omega"] = omega.tolist()
            run_out["expanded_sources"] = int(t.size - di.index.expanded[1])
            run_out["ring_rows"] = int(np.count_nonzero(be.block_pass.ring))
            blocks = be._draw.blocks(di, p.sigma_x, p.sigma_t, be.kappa)
            run_out["blocks"] = int(blocks.count)
            run_out["path"] = be.trigger_path
        run_out["e"] = e.tolist()
        out["runs"].append(run_out)
    return out


def row_sums_case(device: str, n: int) -> dict:
    """The device row sums (engine/device_sums.py) on the check's events, their times spread
    off the day lattice (the bound's terms taken), at three ``tau_t`` (fine and coarse
    lattices), with 64 lanes of about n / 64 rows each: the largest relative difference from
    numpy's sums (:func:`hawkes_cli.engine.row_sums.host_sums`)."""
    from hawkes_cli.engine import device_sums
    from hawkes_cli.engine.binned import BinnedBackground
    from hawkes_cli.engine.row_sums import host_sums

    t, x, y, _ = check_events(n)
    rng = np.random.default_rng(40)
    spread = t + rng.uniform(0.0, 0.999, t.size)
    order = np.argsort(spread, kind="stable")
    t = spread[order]
    times = TimeStructure.from_times(t)
    dev = Device.select(device)
    events = DeviceEvents(dev, t, x[order], y[order], None, precision="float64", times=times)
    lattice = BinnedBackground(t, area=CHECK_AREA, rows=(0, t.size), times=times)
    device_sums.LANES = 64
    sums = device_sums.DeviceRowSums(events, lattice)
    E = rng.exponential(1.0, t.size)
    trigger = np.vstack([E, 1e-3 * E])
    rel = rng.uniform(0.0, 1e-3, t.size)  # renormalized's e_n / M_n
    worst = 0.0
    for tau in (20.0, 3.0, 0.5):
        B, beta = lattice.background(tau)
        got = sums.sums(lattice.lattice_pass(tau), trigger, 0.7, 0.4, 1e-40, rel)
        work = (np.empty(t.size), np.empty(t.size))
        *want, lam = host_sums(B, beta, trigger[0], trigger[1], 0.7, 0.4, 1e-40, work)
        want.append(float(np.dot(0.4 * E / lam, rel)))
        worst = max(worst, *(abs(a - b) / abs(b) for a, b in zip(got, want, strict=True)))
    return {"device": dev.info.name, "lanes": sums.lanes, "worst": worst}


def stages_case(device: str, n: int, sums: bool = False) -> dict:
    """The location draw (``draw_points``) and the per-county edge masses (``raster_mass``;
    model 1, and model 2 with each county's density: two raster levels per row) on ``n``
    events in a 6 x 5 grid of square counties over 10 x 10 (its outer boundary within a few
    lengthscales of most of them): whether the draw gives the host's points bit for bit, and
    the largest difference between the device's masses and the host's."""
    from hawkes_cli.engine.edge_mass import EdgeMass
    from hawkes_cli.engine.point_draw import DevicePointDraw
    from hawkes_cli.engine.region import BoundaryRegion
    from hawkes_cli.engine.region_groups import EventGroups
    from hawkes_cli.geo import PolygonSampler
    from hawkes_cli.simulate import DensityGrid

    grid = DensityGrid.log_uniform(bounds=(0.0, 10.0, 0.0, 10.0), nx=6, ny=5, seed=3)
    polys = PolygonSampler.from_grid(grid)
    codes = np.random.default_rng(4).integers(0, len(polys), n)
    t = np.sort(np.random.default_rng(1).uniform(0.0, 50.0, n))
    x, y = polys.sample(codes, np.random.default_rng(0))
    dev = Device.select(device)
    events = DeviceEvents(dev, t, x, y, None, precision="float32")
    draw = DevicePointDraw(events, *polys.draw_tables, codes)
    r = np.random.default_rng(5).random((n, 3))
    want = polys.place(codes, r)
    got = draw.draw(r)
    events.set_locations(*got)
    region = BoundaryRegion.from_triangles(polys.triangles)
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    on_device = EdgeMass(region, *got, rows=(0, n), groups=groups, events=events)
    on_host = EdgeMass(region, *got, rows=(0, n), groups=groups)
    # model 2: each county's lengthscale sigma_x / sqrt(D), between two raster levels
    m2 = {"rows": (0, n), "groups": groups, "density": np.asarray(grid.density).ravel()[codes]}
    m2_device = EdgeMass(region, *got, events=events, **m2)
    m2_host = EdgeMass(region, *got, **m2)
    worst, worst2, lost = 0.0, 0.0, 0.0
    for sigma in (2.0 ** (-16 / 16), 2.0 ** (-20 / 16)):  # lattice points: one raster level
        (m1, _), (m0, _) = on_device.mass(sigma), on_host.mass(sigma)
        worst = max(worst, float(np.max(np.abs(m1 - m0))))
        lost = max(lost, float(np.mean(m0 < 1.0)))
        (m1, _), (m0, _) = m2_device.mass(8.0 * sigma), m2_host.mass(8.0 * sigma)
        worst2 = max(worst2, float(np.max(np.abs(m1 - m0))))
    # ``sums``: the compensator's edge sums from the masses left on the device (raster_mass at
    # offsets, edge_lost) against the host's, at and off lattice points
    sums_worst, tail = 0.0, t - 50.0
    for edge_d, edge_h, sigma in ((on_device, on_host, 0.5), (m2_device, m2_host, 4.0)):
        for s in (sigma, sigma * 1.01) if sums else ():
            d, h = edge_d.lost_sums(s, 7.0, tail), edge_h.lost_sums(s, 7.0, tail)
            sums_worst = max(sums_worst, *(abs(a - b) / abs(b) for a, b in zip(d, h, strict=True)))
        assert edge_d._on_device or not sums  # the device's sums, not the host's
    return {
        "sums_worst": sums_worst,
        "device": dev.info.name,
        "draw_equal": bool(np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1])),
        "mass_worst": worst,
        "mass2_worst": worst2,
        "share_losing_mass": lost,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--device", required=True)
    ap.add_argument(
        "--engine", choices=("exact", "truncated", "rowsums", "stages", "edgesums"), required=True
    )
    ap.add_argument("--model", type=int, choices=(1, 2), default=1)
    ap.add_argument("--precision", choices=("float32", "float64"), default="float64")
    ap.add_argument("--n", type=int, default=600)
    ap.add_argument("--only-one", action="store_true", help="work-group size 1 only")
    a = ap.parse_args()
    if a.engine == "rowsums":
        print(json.dumps(row_sums_case(a.device, a.n)))
        return
    if a.engine in ("stages", "edgesums"):
        print(json.dumps(stages_case(a.device, a.n, sums=a.engine == "edgesums")))
        return
    print(json.dumps(run(a.device, a.engine, a.model, a.precision, a.n, only_one=a.only_one)))


if __name__ == "__main__":
    main()
