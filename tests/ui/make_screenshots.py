"""Make the README pictures of the Dagster UI (docs/img/lineage.png, docs/img/sft_export_report.png)
from a fresh temporary instance holding ``whileai-pipeline demo``'s run, the same way the UI test
does it (tests/ui/test_webserver_ui.py):

    python3 -m tests.ui.make_screenshots            # writes docs/img/*.png
    python3 -m tests.ui.make_screenshots OUT_DIR

Needs Chromium (bash scripts/install_chromium.sh). Takes about half a minute.
"""

import sys
import tempfile
import time
from pathlib import Path

from . import uikit as ui

MAX_BYTES = 400 * 1024
SHOTS = {
    # name: (viewport width, height, url builder, what to wait for, its description)
    "lineage.png": (1400, 640, lambda base: ui.lineage_url(base), ui.EXPORT_NODES_PASSED,
                    "the lineage graph with both exports' checks passed"),
    "sft_export_report.png": (
        1400, 1000,
        lambda base: ui.asset_url(base, "sft_export", "overview", partition=None),
        "(() => { const t = document.body.innerText;"
        " return t.includes('Latest check results') && t.includes('support_orders')"
        " && t.includes('published') && t.includes('tool_call_roundtrip'); })()",
        "sft_export's latest materialization, its check results and report",
    ),
}


def make(out_dir: Path) -> list[Path]:
    binary = ui.find_chromium()
    if binary is None:
        raise SystemExit("no Chromium: bash scripts/install_chromium.sh")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="whileai-ui-shots-") as tmp:
        root = Path(tmp)
        env = ui.materialize_sample(root / "dagster_home", root / "whileai_data")
        with ui.webserver(env, root) as base, ui.chromium(binary) as page:
            # the left navigation folded to its icons (the UI keeps that choice in localStorage)
            page.goto(f"{base}/server_info")
            page.evaluate("localStorage.setItem('dagster-nav-collapsed', 'true')")
            for name, (width, height, url, ready, what) in SHOTS.items():
                page.set_viewport(width, height)
                page.goto(url(base))
                if name == "lineage.png":
                    page.wait_for(ui.LINEAGE_READY, 90, "the lineage graph")
                page.wait_for(ready, 90, what, settle=2.0)
                path = out_dir / name
                data = page.screenshot(path)
                stats = ui.image_stats(data)
                if stats["colors"] < 64 or stats["non_background"] < 0.02:
                    raise SystemExit(f"{path} looks blank: {stats}")
                if len(data) > MAX_BYTES:
                    raise SystemExit(f"{path} is {len(data)} bytes, over {MAX_BYTES}")
                print(f"{path}: {stats['width']}x{stats['height']}, {len(data) // 1024} KB, {stats['colors']} colours")
                written.append(path)
    return written


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    out_dir = Path(argv[0]) if argv else ui.REPO / "docs" / "img"
    started = time.monotonic()
    make(out_dir)
    print(f"done in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
