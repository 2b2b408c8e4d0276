"""The JavaScript that draws a report's charts offline: Vega, Vega-Lite and vega-embed, in one bundle shipped
with traceql (``vega-bundle.js.gz``, about 0.3 MB; the licenses are in ``vega-bundle.LICENSE``).

The bundle is the one vl-convert builds for the Vega-Lite version that altair writes specs for; it is made
once and stored here, so that a report needs neither vl-convert (84 MiB installed) nor a network. When
altair moves to another Vega-Lite version, regenerate it (vl-convert-python is in the ``dev`` extra)::

    python -m traceql.report.vega

A test checks that the bundle's Vega-Lite version is the one altair's specs name.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from functools import lru_cache
from pathlib import Path

BUNDLE = "vega-bundle.js.gz"
META = "vega-bundle.json"


def _here() -> Path:
    return Path(__file__).resolve().parent


def meta() -> dict:
    """What the bundle is: ``vega_lite`` (as vl-convert names it, e.g. v6_4), ``altair_schema``, ``vl_convert``,
    ``sha256`` of the JavaScript."""
    return json.loads((_here() / META).read_text())


@lru_cache(maxsize=1)
def bundle() -> str:
    """The JavaScript, ready to inline in a ``<script>`` element (no ``</script`` inside)."""
    js = gzip.decompress((_here() / BUNDLE).read_bytes()).decode("utf-8")
    return js.replace("</script", "<\\/script")


def main() -> int:
    """Rebuild the bundle for the Vega-Lite version of the installed altair."""
    import altair as alt
    import vl_convert as vlc
    from altair.utils import _importers  # only here: this maintenance step needs altair's own version mapping

    version = _importers.vl_version_for_vl_convert()
    js = vlc.javascript_bundle(vl_version=version)
    (_here() / BUNDLE).write_bytes(gzip.compress(js.encode("utf-8"), compresslevel=9, mtime=0))
    info = {"vega_lite": version, "altair_schema": alt.SCHEMA_VERSION, "vl_convert": vlc.__version__,
            "sha256": hashlib.sha256(js.encode("utf-8")).hexdigest()}
    (_here() / META).write_text(json.dumps(info, indent=1) + "\n")
    print(f"wrote {_here() / BUNDLE} ({len(js):,} bytes of JavaScript) for Vega-Lite {version}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
