"""The Dagster UI, for real: ``dagster-webserver`` on 127.0.0.1 over a temporary SQLite instance that
holds one materialized sample run, read over GraphQL and looked at in headless Chromium.

    python3 -m pytest -m ui tests/ui

Needs Chromium (``bash scripts/install_chromium.sh`` installs Debian's). Without it the screenshot
test is skipped with the reason shown, unless ``CI`` is set: under CI a missing browser is a failure.
The GraphQL tests need no browser.
"""

import os
import time

import pytest

from . import uikit as ui

pytestmark = pytest.mark.ui


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A temporary DAGSTER_HOME (SQLite) and storage root holding ``whileai-pipeline demo``'s run,
    and the webserver over them. Yields the base URL; the webserver (and its code server) is
    stopped when the module's tests are done, failed or not."""
    root = tmp_path_factory.mktemp("ui")
    started = time.monotonic()
    env = ui.materialize_sample(root / "dagster_home", root / "whileai_data")
    with ui.webserver(env, root) as base:
        print(f"\nsample materialized and webserver up at {base} in {time.monotonic() - started:.1f} s")
        yield base


@pytest.fixture(scope="module")
def asset_nodes(server):
    nodes = ui.graphql(server, ui.ASSET_GRAPH)["assetNodes"]
    return {"/".join(n["assetKey"]["path"]): n for n in nodes}


@pytest.fixture(scope="module")
def browser_binary():
    binary = ui.find_chromium()
    if binary is None:
        where = (f"$CHROMIUM={os.environ['CHROMIUM']} is not an executable" if os.environ.get("CHROMIUM")
                 else "no /usr/bin/chromium and no chromium on PATH")
        reason = f"Chromium missing ({where}); install it with: bash scripts/install_chromium.sh"
        if _in_ci():
            pytest.fail(f"CI is set and {reason}")
        pytest.skip(reason)
    return binary


def test_asset_graph_has_the_five_assets_and_their_edges(asset_nodes):
    assert set(asset_nodes) == set(ui.ASSETS)
    for key, node in asset_nodes.items():
        assert node["groupName"] == ui.GROUP, key
        assert node["repository"]["location"]["name"] == ui.LOCATION, key
        assert node["isPartitioned"], key
        assert ui.PARTITION in node["partitionKeys"], key
    upstream_edges = {("/".join(dep["path"]), key)
                      for key, node in asset_nodes.items() for dep in node["dependencyKeys"]}
    downstream_edges = {(key, "/".join(dep["path"]))
                        for key, node in asset_nodes.items() for dep in node["dependedByKeys"]}
    assert upstream_edges == ui.EDGES
    assert downstream_edges == ui.EDGES


def test_both_gates_on_each_export_passed_for_the_sample(server, asset_nodes):
    for export in ui.EXPORTS:
        checks = asset_nodes[export]["assetChecksOrError"]
        assert checks["__typename"] == "AssetChecks", checks
        by_name = {c["name"]: c for c in checks["checks"]}
        assert set(ui.GATES) <= set(by_name), (export, sorted(by_name))

        latest = ui.graphql(server, ui.LATEST_MATERIALIZATION,
                            {"assetKey": {"path": [export]}, "partition": ui.PARTITION})
        materializations = latest["assetNodeOrError"]["latestMaterializationByPartition"]
        assert len(materializations) == 1 and materializations[0], (export, materializations)
        materialization = materializations[0]
        assert materialization["partition"] == ui.PARTITION
        report = {e["label"]: e for e in materialization["metadataEntries"]}
        assert report["status"]["text"] == "published", (export, report.get("status"))
        assert report["published"]["boolValue"] is True

        for gate in ui.GATES:
            check = by_name[gate]
            assert check["blocking"] is True, (export, gate)
            # the execution that judged the latest materialization (what the asset page shows)
            current = check["executionForLatestMaterialization"]
            assert current is not None, (export, gate, "no execution for the latest materialization")
            assert current["status"] == "SUCCEEDED", (export, gate, current)
            assert current["partition"] == ui.PARTITION
            assert current["evaluation"]["success"] is True

            # and the newest execution for the sample partition, with the materialization it judged
            executions = ui.graphql(server, ui.CHECK_EXECUTIONS, {
                "assetKey": {"path": [export]}, "checkName": gate, "partition": ui.PARTITION,
            })["assetCheckExecutions"]
            assert len(executions) == 1, (export, gate, executions)
            execution = executions[0]
            evaluation = execution["evaluation"]
            assert execution["status"] == "SUCCEEDED", (export, gate, execution)
            assert execution["partition"] == ui.PARTITION
            assert evaluation["checkName"] == gate
            assert evaluation["assetKey"]["path"] == [export]
            assert evaluation["success"] is True, (export, gate, evaluation["description"])
            assert evaluation["severity"] == "ERROR"  # blocking gates fail the run, not a warning
            assert evaluation["partition"] == ui.PARTITION
            # the gate judged the materialization the UI shows as latest, made in the same run
            assert execution["runId"] == materialization["runId"] == current["runId"]
            assert evaluation["targetMaterialization"]["runId"] == materialization["runId"]


def test_lineage_page_renders_in_headless_chromium(browser_binary, server, tmp_path):
    # browser_binary first: a skip for a missing browser costs no webserver start
    shot = tmp_path / "lineage.png"
    with ui.chromium(browser_binary) as page:
        page.set_viewport(1600, 1000)
        # the same decoder on the blank tab first: the non-blank test below does tell the two apart
        blank = ui.image_stats(page.screenshot(tmp_path / "blank.png"))
        page.goto(ui.lineage_url(server))
        drawn = page.wait_for(ui.LINEAGE_READY, timeout=90, what="the lineage graph of the five assets")
        assert drawn["edges"] >= len(ui.EDGES)
        page.wait_for(ui.EXPORT_NODES_PASSED, timeout=60, what="both export nodes with all checks passed")
        data = page.screenshot(shot)
    assert blank["colors"] <= 2 and blank["non_background"] < 0.001, blank

    stats = ui.image_stats(data)
    print(f"\nlineage screenshot {shot}: {stats}")
    assert (stats["width"], stats["height"]) == (1600, 1000), stats
    assert stats["colors"] >= 64, stats  # text, node borders, icons, edges: thousands in practice
    assert stats["non_background"] >= 0.02, stats


# What the asset page's metadata table and its Plots read: every entry's label and type, in order.
METADATA_KINDS = """
query MetadataKinds($assetKey: AssetKeyInput!, $partition: String!) {
  assetNodeOrError(assetKey: $assetKey) {
    ... on AssetNode {
      latestMaterializationByPartition(partitions: [$partition]) {
        metadataEntries { __typename label }
      }
    }
  }
}"""


def test_export_pages_open_with_the_summary_and_plot_the_numbers_to_trend(server):
    """The table opens with status and the summary; Plots draws Int and Float entries only, so the numbers
    an engineer trends over re-exports must come as those (as the UI's GraphQL types them)."""
    for export, wanted in (("sft_export", {"mean_reward", "gates_failed", "openai/rows_written",
                                           "openai/rows_leaked", "openai/warnings"}),
                           ("dpo_export", {"gates_failed", "openai/pairs", "openai/mean_margin",
                                           "openai/rows_leaked", "openai/warnings"})):
        node = ui.graphql(server, METADATA_KINDS, {"assetKey": {"path": [export]}, "partition": ui.PARTITION})
        entries = node["assetNodeOrError"]["latestMaterializationByPartition"][0]["metadataEntries"]
        assert [e["label"] for e in entries[:2]] == ["status", "summary"], entries[:3]
        assert entries[1]["__typename"] == "MarkdownMetadataEntry"
        plotted = {e["label"] for e in entries if e["__typename"] in ("IntMetadataEntry", "FloatMetadataEntry")}
        assert wanted <= plotted, (export, sorted(wanted - plotted))
