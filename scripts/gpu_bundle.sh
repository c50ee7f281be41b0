#!/usr/bin/env bash
# The wheels a lent GPU machine (the device tool's nvidia-h200: x86-64, Python 3.12, no network)
# lacks for benchmarks/gpu_node.sh, fetched HERE into the ignored folder .gpu/wheels, which the
# device call carries (carry [".gpu"]); benchmarks/gpu_session.sh installs them there.
#
#   bash scripts/gpu_bundle.sh            # run just before the device call: it also records
#                                         # the commit in .gpu/commit (the copy there has none)
#
# Only what that image lacks: it has numpy, scipy, h5py, pyyaml, click, matplotlib, pandas,
# xarray, packaging, typing-extensions, setuptools, certifi (/work/.library/device/KINDS.md's
# list), so those are never carried. The versions are the ones the project's .venv was tested
# with. WHEELS="name==version ..." replaces the list; EXTRA="..." adds to it, e.g.
# EXTRA="arviz==0.22.0 h5netcdf==1.8.2 xarray-einstats==0.9.1" (1.8 MB) for hawkes-diagnose.
# The default list is 44 MiB of the device call's 64 MiB (the tree with it is printed).
set -uo pipefail
cd "$(dirname "$0")/.."
DEST=.gpu/wheels
PY=${PYTHON:-python3}
# pyopencl and its needs beyond the image (pytools -> platformdirs, siphash24); shapely,
# pyogrio and plotly-geo's Census counties (every chain of the bench reads the county polygons:
# the censored edge correction's region and the location redraws)
WHEELS=${WHEELS:-"pyopencl==2026.1.4 pytools==2026.1.1 platformdirs==4.14.9 siphash24==1.9
    shapely==2.2.0 pyogrio==0.13.0 plotly-geo==1.0.0"}
# shellcheck disable=SC2086  # the lists split on purpose
set -- $WHEELS ${EXTRA:-}
rm -rf "$DEST"  # one version of each: two would stop the install there
mkdir -p "$DEST"
"$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --abi cp312 --abi abi3 --abi none --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 --platform any \
    -d "$DEST" "$@" || { echo "gpu_bundle: pip download failed" >&2; exit 1; }
got=$(find "$DEST" -name '*.whl' | wc -l)
if [ "$got" -ne "$#" ]; then
    echo "gpu_bundle: $got wheels for $# names in $DEST" >&2
    exit 1
fi
# plotly-geo (24 MB) down to the one file hawkes reads, the 2016 counties (11 MB), unchanged
for whl in "$DEST"/plotly_geo-*.whl; do
    [ -e "$whl" ] || continue
    "$PY" - "$whl" << 'EOF' || { echo "gpu_bundle: could not trim $whl" >&2; exit 1; }
import base64
import hashlib
import sys
import zipfile

path = sys.argv[1]
with zipfile.ZipFile(path) as z:
    keep = {
        i.filename: z.read(i)
        for i in z.infolist()
        if not i.filename.endswith("/RECORD")
        and (
            i.filename.startswith("_plotly_geo/package_data/cb_2016_us_county_500k.")
            or i.filename == "_plotly_geo/__init__.py"
            or ".dist-info/" in i.filename
        )
    }
record = next(n for n in keep if n.endswith(".dist-info/METADATA")).replace("METADATA", "RECORD")
lines = []
for name, data in keep.items():
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    lines.append(f"{name},sha256={digest},{len(data)}")
keep[record] = ("\n".join([*lines, f"{record},,"]) + "\n").encode()
with zipfile.ZipFile(path + ".tmp", "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
    for name, data in keep.items():
        z.writestr(name, data)
EOF
    mv -f "$whl.tmp" "$whl"
done
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
[ -n "$(git status --porcelain --untracked-files=no 2>/dev/null)" ] && commit="$commit+dirty"
echo "$commit" > .gpu/commit
ls -l "$DEST" | tail -n +2
echo "commit $commit (.gpu/commit)"
# what the device call sends: tracked files, untracked ones git does not ignore, and .gpu
tree=$(git ls-files -z --cached --others --exclude-standard | xargs -0 -r du -cb 2> /dev/null \
    | tail -1 | cut -f1)
gpu=$(du -sb .gpu | cut -f1)
echo "travels: tree $((tree / 1048576)) MiB + .gpu $((gpu / 1048576)) MiB" \
    "= $(((tree + gpu) / 1048576)) MiB of the 64 MiB limit"
[ $((tree + gpu)) -lt $((60 * 1048576)) ] || echo "gpu_bundle: WARNING: near the 64 MiB limit" >&2
