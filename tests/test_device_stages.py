"""Host stages of a location redraw moved onto the OpenCL device, each against the host's own
computation: the location draw (engine/point_draw.py), the grid index's sorted sources
(``index_sources``), model 1's per-county edge masses (engine/region_groups_device.py), the
presence grid (``presence_count``, ``presence_scan``) and the row blocks' levels within reach
(``block_levels``).

Each must give the host's numbers (bit for bit where the host's float64 operations can be
repeated exactly; the masses to float64 rounding) and leave them where the kernels read them,
so that nothing a chain computes changes.
"""

from __future__ import annotations

import numpy as np
import pytest

from hawkes_cli.geo import PolygonSampler
from hawkes_cli.resample import LocationStream
from hawkes_cli.simulate import DensityGrid

pytestmark = pytest.mark.opencl


def _read(events, buf, dtype, n):
    out = np.empty(n, dtype=dtype)
    events.read(out, buf)
    return out


@pytest.fixture(scope="module")
def counties():
    """The package's US county polygons (every state, ~1M triangles) and 100,000 events in
    counties drawn with a skew, so small and large counties, islands and holes all appear."""
    from hawkes_cli.counties import load_polygons

    polys, _ = load_polygons()
    rng = np.random.default_rng(5)
    k = len(polys)
    weight = rng.pareto(1.0, k) + 0.01
    codes = rng.choice(k, size=100_000, p=weight / weight.sum())
    return polys, codes


@pytest.mark.parametrize("precision", ["float32", "float64"])
def test_device_draw_is_the_host_draw_bit_for_bit(counties, precision):
    """On the real counties: the same points as PolygonSampler.sample from the same stream,
    and the events' buffers exactly what set_locations would upload for them."""
    from hawkes_cli.engine.device import Device, DeviceEvents, padded
    from hawkes_cli.engine.point_draw import DevicePointDraw

    polys, codes = counties
    n = codes.size
    t = np.sort(np.random.default_rng(1).uniform(0.0, 100.0, n))
    x0, y0 = polys.sample(codes, np.random.default_rng(2))
    events = DeviceEvents(Device.select(None), t, x0, y0, None, precision=precision)
    events.keep_float64_copies()
    draw = DevicePointDraw(events, *polys.draw_tables, codes)
    for seed in (3, 4):
        want = polys.sample(codes, np.random.default_rng(seed))
        got = draw.draw(np.random.default_rng(seed).random((n, 3)))
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
        events.set_locations(*got)  # takes the drawn buffers
        assert events.x is got[0] and events.y is got[1]
        real = events.real
        for host, bh, bl, bd in (
            (want[0], events.buf_x, events.buf_xl, events.buf_xd),
            (want[1], events.buf_y, events.buf_yl, events.buf_yd),
        ):
            hi = padded(host.astype(real), real, 0.0)
            np.testing.assert_array_equal(_read(events, bh, real, hi.size), hi)
            if real is np.float32:
                lo = padded((host - host.astype(real)).astype(real), real, 0.0)
                np.testing.assert_array_equal(_read(events, bl, real, lo.size), lo)
            else:
                assert bl is bh
            np.testing.assert_array_equal(_read(events, bd, np.float64, n), host)


def test_other_arrays_are_uploaded_not_taken(counties):
    """set_locations with arrays other than the draw's (equal or not) uploads them: the
    drawn buffers are only ever taken for the very arrays the draw returned."""
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.point_draw import DevicePointDraw

    polys, codes = counties
    n = codes.size
    t = np.sort(np.random.default_rng(1).uniform(0.0, 100.0, n))
    events = DeviceEvents(Device.select(None), t, *polys.sample(codes, np.random.default_rng(2)),
                          None, precision="float32")  # fmt: skip
    draw = DevicePointDraw(events, *polys.draw_tables, codes)
    x, y = draw.draw(np.random.default_rng(6).random((n, 3)))
    kept = events.buf_x
    other = x + 1.0
    events.set_locations(other, y.copy())
    assert events.buf_x is not kept
    np.testing.assert_array_equal(
        _read(events, events.buf_x, np.float32, n), other.astype(np.float32)
    )
    events.set_locations(x, y)  # the pending draw was dropped: this uploads too
    np.testing.assert_array_equal(_read(events, events.buf_x, np.float32, n), x.astype(np.float32))


def test_location_stream_device_and_host_agree(monkeypatch):
    """A LocationStream with the device draw and one without give the same draws from the
    same seed, and rewinding repeats a draw (as a resumed chain does)."""
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.point_draw import DevicePointDraw

    grid = DensityGrid.log_uniform(bounds=(0.0, 10.0, 0.0, 10.0), nx=6, ny=5, seed=3)
    polys = PolygonSampler.from_grid(grid)
    codes = np.random.default_rng(4).integers(0, len(polys), 3000)
    t = np.sort(np.random.default_rng(1).uniform(0.0, 50.0, codes.size))
    events = DeviceEvents(Device.select(None), t, *polys.sample(codes, np.random.default_rng(0)),
                          None, precision="float64")  # fmt: skip
    host = LocationStream(polys, codes, np.random.default_rng(9))
    dev = LocationStream(polys, codes, np.random.default_rng(9),
                         device=DevicePointDraw(events, *polys.draw_tables, codes))  # fmt: skip
    for _ in range(3):
        a, b = host.draw(), dev.draw()
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    again = dev.last_state
    last = b
    dev.rewind(again)
    b = dev.draw()
    np.testing.assert_array_equal(b[0], last[0])
    np.testing.assert_array_equal(b[1], last[1])
    # drawn ahead (the next draw's uniforms made on the worker thread): the same draws, and a
    # rewind between them drops what was made ahead
    import threading

    from hawkes_cli import resample
    from hawkes_cli.engine import ahead

    made = []
    real = resample._uniforms

    def tracked(rng, n):
        made.append(threading.current_thread().name)
        return real(rng, n)

    monkeypatch.setattr(resample, "_uniforms", tracked)
    for k in range(4):
        if k == 2:
            dev.rewind(dev.last_state)
            host.rewind(host.last_state)
        dev.draw_ahead()
        a, b = host.draw(), dev.draw()
        np.testing.assert_array_equal(a[0], b[0])
        np.testing.assert_array_equal(a[1], b[1])
    # made here for draws 0 and 2 (none made ahead yet; rewound), else on the worker
    ahead.on_worker(lambda: None).result()
    assert made.count("MainThread") == 2, made
    assert sum(name.startswith("hawkes-ahead") for name in made) == 4, made


def _truncated(model: int, precision: str, seed: int):
    """6,000 events of the self-check's data (a dense city with expansion boxes, densities
    over several levels) on the device, and a truncated backend of them: t, x, y, events, it."""
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.selfcheck import check_events
    from hawkes_cli.engine.truncated import TruncatedBackend

    t, x, y, d = check_events(6000, seed)
    events = DeviceEvents(Device.select(None), t, x, y, d if model == 2 else None,
                          precision=precision)  # fmt: skip
    tr = TruncatedBackend(events, model=model, area=25.0, tolerance=0.1, kappa=20.0)
    return t, x, y, events, tr


def _host_sources(index, time, x, y, weight, origin, real):
    """The sorted sources as the host computed them before ``index_sources`` (the reference):
    time, weight, offset from the cell's corner, 4 x 4 sub-cell, expansion offsets."""
    o = index.order
    lev = index.level[o]
    h, ih = index.h[lev], index.inv_h[lev]
    xs, ys = x[o], y[o]
    x0, y0 = origin
    cx, cy = np.floor((xs - x0) * ih), np.floor((ys - y0) * ih)
    rx, ry = xs - (x0 + cx * h), ys - (y0 + cy * h)
    qx = np.clip(np.floor(rx * (4.0 / h)), 0, 3)
    qy = np.clip(np.floor(ry * (4.0 / h)), 0, 3)
    mk0 = index.expanded[1]
    half = 0.5 * h[mk0:]

    def pad(v, dtype):
        return np.concatenate([v.astype(dtype), np.zeros(8, dtype)])

    return {
        "st": pad(time[o], real), "sxr": pad(rx, real), "syr": pad(ry, real),
        "sw": pad(weight[o], real), "std": time[o], "swd": weight[o],
        "sq": (4 * qx + qy).astype(np.uint8),
        "enx": pad(np.clip(rx[mk0:] / half - 1.0, -1.0, 1.0), np.float64),
        "eny": pad(np.clip(ry[mk0:] / half - 1.0, -1.0, 1.0), np.float64),
    }  # fmt: skip


@pytest.mark.parametrize("precision", ["float32", "float64"])
@pytest.mark.parametrize("model", [1, 2])
def test_index_sources_gathered_on_the_device_are_the_hosts(model, precision):
    """The grid index's sorted sources (times, weights, cell offsets, sub-cells, expansion
    offsets) gathered by ``index_sources`` equal the host's numpy computation bit for bit, on
    data with expansion boxes (a dense city) and several density levels, before and after a
    location redraw."""
    t, x, y, events, tr = _truncated(model, precision, 3)
    rng = np.random.default_rng(0)
    for moved in (False, True):
        if moved:
            x, y = x + rng.normal(0, 0.01, x.size), y + rng.normal(0, 0.01, y.size)
            tr.set_locations(x, y)
        di = tr._draw.index(0.05, tr.kappa)
        assert di.index.expanded[1] < t.size  # some sources are summed by their moments
        want = _host_sources(di.index, t, x, y, tr._w, (tr._draw.x0, tr._draw.y0), events.real)
        for name, host in want.items():
            got = _read(events, getattr(di.buffers, name), host.dtype, host.size)
            np.testing.assert_array_equal(got, host, err_msg=name)


@pytest.mark.parametrize("sigma_x", [0.046, 0.2])
def test_grouped_masses_read_on_the_device_are_the_hosts(counties, sigma_x):
    """Model 1's per-county edge masses (rasters per tile, behind the distance screen) read on
    the device equal the host's read to float64 rounding at lattice points, for points drawn
    in their counties twice and for a few moved out of their county's box (host path); off
    the lattice the host's interpolation is used."""
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.edge_mass import EdgeMass, mass_lattice
    from hawkes_cli.engine.region import BoundaryRegion
    from hawkes_cli.engine.region_groups import EventGroups

    polys, codes = counties
    codes = codes[:30_000]
    region = BoundaryRegion.from_triangles(polys.triangles)
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes[10_000:])
    x, y = polys.sample(codes, np.random.default_rng(2))
    t = np.sort(np.random.default_rng(1).uniform(0.0, 100.0, codes.size))
    events = DeviceEvents(Device.select(None), t, x, y, None, precision="float32")
    dev = EdgeMass(region, x, y, rows=(10_000, 30_000), groups=groups, events=events)
    host = EdgeMass(region, x, y, rows=(10_000, 30_000), groups=groups)
    assert dev._device is not None and host._device is None
    lo, hi, _ = mass_lattice(sigma_x)
    wide = dev._grouped.plan(dev._grouped.levels(lo)[0]).wide
    assert wide and wide[0].rows.size > 0  # counties wider than a tile read by their squares
    for step in range(2):
        if step:
            x, y = polys.sample(codes, np.random.default_rng(3))
            x[10_000:10_003] = [-124.9, -80.0, -100.0]  # outside their counties' boxes
            events.set_locations(x, y)
            dev.set_locations(x, y)
            host.set_locations(x, y)
        for s in (lo, hi, sigma_x):
            (m1, e1), (m0, e0) = dev.mass(s), host.mass(s)
            assert np.mean(m0 < 1.0) > 0.01  # boundary events are there
            np.testing.assert_allclose(m1, m0, rtol=0, atol=1e-12)
            np.testing.assert_array_equal(e1, e0)


def test_model2_grouped_masses_read_on_the_device_are_the_hosts(counties):
    """Model 2's per-county masses (each county between the two raster levels around its own
    lengthscale, weighted per row) read on the device equal the host's read to float64
    rounding, at lattice points and off them, after a redraw, with rows out of their
    counties' boxes."""
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.edge_mass import EdgeMass
    from hawkes_cli.engine.region import BoundaryRegion
    from hawkes_cli.engine.region_groups import EventGroups

    polys, codes = counties
    codes = codes[:20_000]
    region = BoundaryRegion.from_triangles(polys.triangles)
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    rng = np.random.default_rng(4)
    county_d = np.exp(rng.uniform(np.log(5.0), np.log(500.0), groups.boxes.shape[0]))
    density = county_d[groups.group]
    x, y = polys.sample(codes, np.random.default_rng(2))
    t = np.sort(np.random.default_rng(1).uniform(0.0, 100.0, codes.size))
    events = DeviceEvents(Device.select(None), t, x, y, density, precision="float32")
    kw = {"rows": (0, codes.size), "density": density, "groups": groups}
    dev = EdgeMass(region, x, y, events=events, **kw)
    host = EdgeMass(region, x, y, **kw)
    assert dev._device is not None and host._device is None
    for step in range(2):
        if step:
            x, y = polys.sample(codes, np.random.default_rng(3))
            x[:3] = [-124.9, -80.0, -100.0]  # outside their counties' boxes
            events.set_locations(x, y)
            dev.set_locations(x, y)
            host.set_locations(x, y)
        for s in (0.5, 0.5 * 2 ** (1 / 16), 0.52):
            (m1, e1), (m0, e0) = dev.mass(s), host.mass(s)
            assert np.mean(m0 < 1.0) > 0.01
            np.testing.assert_allclose(m1, m0, rtol=0, atol=1e-12)
            np.testing.assert_array_equal(e1, e0)


def _county_case(counties, model):
    """20,000 events in the US counties for the edge masses' device tests: ``(polys, codes,
    region, groups, density, sigma_x, x, y, t)``; model 2 with county densities log-uniform
    over 5-500 and its lengthscale scale."""
    from hawkes_cli.engine.region import BoundaryRegion
    from hawkes_cli.engine.region_groups import EventGroups

    polys, codes = counties
    codes = codes[:20_000]
    region = BoundaryRegion.from_triangles(polys.triangles)
    groups = EventGroups.of_polygons(polys.triangles, polys.tri_owner, codes)
    density, sigma_x = None, 0.0475
    if model == 2:
        county_d = np.exp(
            np.random.default_rng(4).uniform(np.log(5.0), np.log(500.0), len(groups.boxes))
        )
        density, sigma_x = county_d[groups.group], 0.5075
    x, y = polys.sample(codes, np.random.default_rng(2))
    t = np.sort(np.random.default_rng(1).uniform(0.0, 100.0, codes.size))
    return polys, codes, region, groups, density, sigma_x, x, y, t


@pytest.mark.parametrize("poison", [None, float("nan")], ids=["plain", "poisoned"])
@pytest.mark.parametrize("model", [1, 2])
def test_compensator_edge_sums_on_the_device_are_the_hosts(counties, model, poison, monkeypatch):
    """The compensator's edge sums ``sum s_n (1 - M_n)`` and ``sum s_n e_n`` (``s_n = 1 -
    exp(-(T - t_n) / sigma_t)``) summed on the device from masses left there
    (``edge_lost``) equal the same sums by hand from the host's own masses (``mass``), to
    float64 rounding: on and off lattice points (model 1: one point and four; model 2: four
    and five), across a lattice point and back, at two sigma_t, after a redraw, with the rows
    the host computes among them (model 1: a wide county's row in none of its squares); and
    with rows out of their counties' boxes (then the host's path). ``poisoned``: every buffer
    the kernels write starts as NaN (``device.POISON``), so a mass or lane ``edge_lost`` read
    that no kernel wrote would turn a sum into NaN (Oclgrind's uninitialised-value check
    cannot see this: tests/test_simulator.py)."""
    from hawkes_cli.engine import device as device_mod
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.edge_mass import EdgeMass, mass_lattice

    monkeypatch.setattr(device_mod, "POISON", poison)
    polys, codes, region, groups, density, sigma_x, x, y, t = _county_case(counties, model)
    tail = t - 100.0
    events = DeviceEvents(Device.select(None), t, x, y, density, precision="float32")
    kw = {"rows": (0, codes.size), "density": density, "groups": groups}
    dev = EdgeMass(region, x, y, events=events, **kw)
    host = EdgeMass(region, x, y, **kw)
    lo, hi, _ = mass_lattice(sigma_x)
    steps = (sigma_x, sigma_x * 1.002, hi, hi * 1.01, sigma_x, lo)
    wide = dev._grouped.plan(dev._grouped.levels(lo)[0]).wide[0]
    for draw in range(3):
        if draw:
            x, y = polys.sample(codes, np.random.default_rng(10 + draw))
            if draw == 1 and model == 1:  # a wide county's row in its box, in no square
                row, x[row], y[row] = _in_no_square(groups, wide)
            if draw == 2:
                x[:3] = [-124.9, -80.0, -100.0]  # outside their counties' boxes
            events.set_locations(x, y)
            dev.set_locations(x, y)
            host.set_locations(x, y)
        computed = 0  # rows the host computed, over the stencils
        for s in steps:
            for sigma_t in (3.0, 40.0):
                m, e = host.mass(s)
                share = -np.expm1(tail / sigma_t)
                want = (float(np.dot(share, 1.0 - m)), float(np.dot(share, e)))
                assert want[0] > 1.0 and want[1] > 0.0
                for edge in (dev, host):
                    got = edge.lost_sums(s, sigma_t, tail)
                    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
            computed += sum(g.host_rows.size for g, _ in dev._on_device.values())
        assert bool(dev._on_device) == (draw < 2)  # device sums (not the host's) until then
        if draw == 1 and model == 1:  # (model 2's squares cover its wide counties' boxes)
            assert computed > 0  # the row in no square came from the host


def _in_no_square(groups, wide):
    """``(row, x, y)``: one of the wide rows and a point in its county's box in none of the
    squares of the wide counties (:class:`~hawkes_cli.engine.region_groups.WideRows`)."""
    from hawkes_cli.engine.region_groups import square_key

    for row in wide.rows[np.unique(groups.group[wide.rows], return_index=True)[1]]:
        x0, x1, y0, y1 = groups.boxes[groups.group[row]]
        gx, gy = np.meshgrid(np.linspace(x0, x1, 41)[1:-1], np.linspace(y0, y1, 41)[1:-1])
        key = square_key(np.floor(gx.ravel() / wide.side), np.floor(gy.ravel() / wide.side))
        free = np.flatnonzero(~np.isin(key, wide.keys))
        if free.size:
            return row, gx.ravel()[free[0]], gy.ravel()[free[0]]
    raise AssertionError("every wide county's box is covered by squares")


@pytest.mark.parametrize("model", [1, 2])
def test_a_redraw_uploads_no_raster_again(counties, model, monkeypatch):
    """A chain's edge masses on the device: the first location draw uploads the rasters of the
    stencil's lattice points (model 1's cubic: four; model 2's cubics around each county's
    lengthscale: five), and a redraw with
    moves of sigma_x inside the lattice step uploads none (the device keeps them; with fewer
    kept than the stencil's points every redraw uploaded all of them again)."""
    from hawkes_cli.engine import region_groups_device
    from hawkes_cli.engine.device import Device, DeviceEvents
    from hawkes_cli.engine.edge_mass import EdgeMass

    polys, codes, region, groups, density, sigma_x, x, y, t = _county_case(counties, model)
    events = DeviceEvents(Device.select(None), t, x, y, density, precision="float32")
    edge = EdgeMass(
        region, x, y, rows=(0, codes.size), density=density, groups=groups, events=events
    )
    uploads = []
    upload = region_groups_device.DeviceGroupedMass._upload_level
    monkeypatch.setattr(
        region_groups_device.DeviceGroupedMass,
        "_upload_level",
        lambda self, *a: uploads.append(1) or upload(self, *a),
    )
    points = len(edge.stencil(sigma_x)[0])
    assert points == (4 if model == 1 else 5)
    for draw in range(3):
        if draw:
            x, y = polys.sample(codes, np.random.default_rng(10 + draw))
            events.set_locations(x, y)
            edge.set_locations(x, y)
        for move in (1.0, 1.001, 0.999, 1.002):  # inside the step around sigma_x
            rows, lost, _ = edge.deficit(sigma_x * move)
            assert rows.size > 100 and np.all(lost >= 0) and np.mean(lost > 0) > 0.5
        assert len(uploads) == (points if draw == 0 else 0), (draw, len(uploads))
        uploads.clear()


@pytest.mark.parametrize("model", [1, 2])
def test_block_levels_on_the_device_are_the_hosts(model):
    """The presence grid's summed-area tables counted on the device are grid.level_presence's,
    and the levels within reach of each row block found from them are grid.block_levels' bit
    for bit (every level's bit, model 2's many levels), before and after a redraw."""
    from hawkes_cli.engine.grid import block_levels, lattice_up, level_kappas, level_presence

    _, x, y, events, tr = _truncated(model, "float32", 4)
    rng = np.random.default_rng(1)
    for moved in (False, True):
        if moved:
            x, y = x + rng.normal(0, 0.02, x.size), y + rng.normal(0, 0.02, y.size)
            tr.set_locations(x, y)
        for sigma_x in (0.01, 0.05, 0.3):
            di = tr._draw.index(sigma_x, tr.kappa)
            blocks = tr._draw.rows(di, 10.0)
            reach = 1.5 * np.sqrt(2.0 * level_kappas(lattice_up(tr.kappa), tr._ceil) / tr._floor)
            reach = reach * lattice_up(sigma_x)
            presence = level_presence(x, y, tr._level, tr.nlevels)
            dp = tr._draw.presence
            assert (dp.x0, dp.y0, dp.cell) == (presence.x0, presence.y0, presence.cell)
            sat = _read(events, dp.sat, np.int32, presence.sat.size).reshape(presence.sat.shape)
            np.testing.assert_array_equal(sat, presence.sat)
            want = block_levels(presence, x, y, blocks, reach)
            got = _read(events, tr._draw.presence.block_levels(events, events.upload(blocks),
                        blocks.shape[0], reach), np.uint64, blocks.shape[0])  # fmt: skip
            assert np.any(want != want[0]) or model == 1  # blocks differ in their levels
            np.testing.assert_array_equal(got, want)
