"""The location redraw on the OpenCL device (engine/point_draw.py) against the host's.

The device draw must give the host draw's points bit for bit (same uniforms, same search, same
float64 operations), leave them in every location buffer the kernels read exactly as an upload
of those points would, and so change nothing a chain computes.
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


def test_location_stream_device_and_host_agree():
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
