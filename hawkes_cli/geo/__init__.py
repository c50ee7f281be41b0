"""County polygons and uniform sampling of points inside them (the cut posterior, DESIGN section 5).

In the cut posterior every ``resample_every`` iterations each event's location is redrawn
uniformly inside its county polygon. :class:`PolygonSampler` makes that O(N) and vectorised:

1. Once, when the sampler is built, every polygon is cut into triangles (a constrained Delaunay
   triangulation that respects holes and the parts of a MultiPolygon; a box is two triangles).
   The triangles of polygon ``k`` are stored contiguously, ``offsets[k]:offsets[k+1]``, with the
   cumulative sum of their areas normalised so that the last one of each polygon is exactly 1.
2. Each draw takes exactly three uniforms per event, ``r = rng.random((N, 3))``:
   ``r[:, 0]`` picks a triangle of the event's polygon with probability proportional to its area
   (one :func:`numpy.searchsorted` over all triangles, on the key ``owner + cumulative area``);
   ``r[:, 1]`` and ``r[:, 2]`` are barycentric coordinates ``(u, v)``, reflected to
   ``(1 - u, 1 - v)`` when ``u + v > 1``, giving a uniform point ``A + u (B - A) + v (C - A)`` in
   the triangle ``ABC``.

A polygon is then sampled uniformly because a triangle is chosen with probability equal to its
share of the polygon's area and the point is uniform within the triangle. The fixed consumption
of the generator (``3 N`` doubles from :meth:`numpy.random.Generator.random`, nothing else) is part
of the contract: a chain's draws depend only on its seed, and a checkpointed generator state
resumes the same sequence.

Polygon files (shapefile, GeoPackage) are read by :func:`read_polygon_layer` into a
:class:`PolygonLayer` (keys, geometries, attribute fields, CRS label), the one reader that
:meth:`PolygonSampler.from_file` and :mod:`hawkes_cli.counties` share.

Modules, each importing only those above it: :mod:`.polygons` (checks, repairs and the
constrained Delaunay triangulation), :mod:`.files` (:class:`PolygonLayer`,
:func:`read_polygon_layer`), :mod:`.sampler` (:class:`PolygonSampler`).

Coordinates are whatever the polygons are given in (for the Census county file, NAD83 lon/lat
degrees); areas are in those coordinate units squared. Nothing here reprojects.

shapely and pyogrio are imported only inside the functions that need them, so importing this
package is cheap. Data problems (empty or degenerate polygons, unknown county codes, unreadable
files) are :class:`~hawkes_cli.errors.EventsError`; bad arguments are
:class:`~hawkes_cli.errors.UsageError`.
"""

from __future__ import annotations

from .files import PolygonLayer, read_polygon_layer, require_polygon_file, require_pyogrio
from .sampler import PolygonSampler

__all__ = [
    "PolygonLayer",
    "PolygonSampler",
    "read_polygon_layer",
    "require_polygon_file",
    "require_pyogrio",
]
