"""The pieces of the UI test: a temporary instance holding the sample run, ``dagster-webserver`` on
127.0.0.1, GraphQL against it, headless Chromium driven over the DevTools protocol, and a small PNG
decoder (zlib only) to tell a rendered page from a blank one.

Everything here is started as a subprocess in its own process group and stopped by that group's id;
nothing listens anywhere but 127.0.0.1. Used by ``test_webserver_ui.py`` and by
``make_screenshots.py`` (the README pictures).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import zlib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKSPACE = REPO / "workspace.yaml"
LOCATION = "whileai_pipeline"
REPOSITORY = "__repository__"  # Definitions load as the one implicit repository of a location
GROUP = "whileai"
PARTITION = "support_orders"  # the bundled sample run (whileai_pipeline/sample/support_orders.jsonl)

ASSETS = ("raw_simulation_data", "scored_simulation_data", "preference_pairs", "sft_export", "dpo_export")
EDGES = {  # (upstream, downstream)
    ("raw_simulation_data", "scored_simulation_data"),
    ("scored_simulation_data", "preference_pairs"),
    ("scored_simulation_data", "sft_export"),
    ("preference_pairs", "dpo_export"),
}
EXPORTS = ("sft_export", "dpo_export")
GATES = ("tool_call_roundtrip", "privileged_leak")

# The flags this machine's Chromium needs (no sandbox as root, no GPU, and no background traffic:
# the network is closed, and Chromium's own connections would otherwise fail by the dozen).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--disable-default-apps",
    "--hide-scrollbars",
    "--mute-audio",
    "--disable-dev-shm-usage",  # /dev/shm is small in many containers; use /tmp instead
    "--remote-allow-origins=http://127.0.0.1",
)

# dagster.yaml for the temporary instance: SQLite storage (the default, under DAGSTER_HOME), no
# telemetry, and no "join the community" dialog over the page in the screenshots.
DAGSTER_YAML = "telemetry:\n  enabled: false\nnux:\n  enabled: false\n"


class UIError(RuntimeError):
    pass


# --------------------------------------------------------------------------------------- processes

def find_chromium() -> str | None:
    """``$CHROMIUM``, else Debian's /usr/bin/chromium, else whatever Chromium is on PATH."""
    env = os.environ.get("CHROMIUM")
    if env:
        return env if os.access(env, os.X_OK) else None
    for name in ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _start(cmd, *, env=None, cwd=None, log=None) -> subprocess.Popen:
    return subprocess.Popen(
        cmd, env=env, cwd=cwd, stdin=subprocess.DEVNULL,
        stdout=log or subprocess.DEVNULL, stderr=subprocess.STDOUT if log else subprocess.DEVNULL,
        start_new_session=True,  # its own process group: the code server and renderers go with it
    )


def stop(proc: subprocess.Popen | None, grace: float = 10.0) -> None:
    """SIGTERM the process group this module started, then SIGKILL what is left of it."""
    if proc is None:
        return
    pgid = proc.pid  # start_new_session: the group id is the leader's pid
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            continue
        # the leader is gone; children of the group may linger a moment, take them too
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, signal.SIGKILL)
        break


def _tail(path: Path, n: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-n:])
    except OSError:
        return "(no log)"


# ------------------------------------------------------------------------------------- the instance

def instance_env(dagster_home: Path, storage_root: Path) -> dict:
    env = dict(os.environ)
    env.update(
        DAGSTER_HOME=str(dagster_home),
        WHILEAI_PIPELINE_HOME=str(storage_root),
        PYTHONUNBUFFERED="1",
        # nothing in here may reach for the network
        DAGSTER_DISABLE_TELEMETRY="1",
        NO_PROXY="127.0.0.1,localhost",
        no_proxy="127.0.0.1,localhost",
    )
    return env


def materialize_sample(dagster_home: Path, storage_root: Path, timeout: float = 150.0) -> dict:
    """A SQLite instance in ``dagster_home`` holding one successful run of the sample: the CLI's own
    ``whileai-pipeline demo`` with ``DAGSTER_HOME`` set, exactly as the README's "The UI" section tells
    a user to do."""
    dagster_home.mkdir(parents=True, exist_ok=True)
    (dagster_home / "dagster.yaml").write_text(DAGSTER_YAML)
    env = instance_env(dagster_home, storage_root)
    proc = subprocess.run(
        [sys.executable, "-m", "whileai_pipeline.cli", "demo"],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=timeout,
    )
    if proc.returncode != 0:
        raise UIError(f"whileai-pipeline demo exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return env


# ------------------------------------------------------------------------------------- the webserver

def graphql(base: str, query: str, variables: dict | None = None, timeout: float = 30.0) -> dict:
    body = json.dumps({"query": query, "variables": variables or {}}).encode()
    req = urllib.request.Request(f"{base}/graphql", data=body, headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as resp:
        payload = json.load(resp)
    if payload.get("errors"):
        raise UIError(f"GraphQL errors: {json.dumps(payload['errors'], indent=1)[:2000]}")
    return payload["data"]


LOCATION_STATUS = """
query LocationStatus {
  locationStatusesOrError {
    __typename
    ... on WorkspaceLocationStatusEntries { entries { name loadStatus } }
    ... on PythonError { message }
  }
}"""

LOCATION_ERROR = """
query LocationError($name: String!) {
  workspaceLocationEntryOrError(name: $name) {
    __typename
    ... on WorkspaceLocationEntry {
      locationOrLoadError { __typename ... on PythonError { message stack } }
    }
  }
}"""


@contextlib.contextmanager
def webserver(env: dict, log_dir: Path, startup_timeout: float = 90.0):
    """``dagster-webserver -h 127.0.0.1 -p <free port> -w workspace.yaml``; yields its base URL once
    ``/server_info`` answers and the code location has loaded. Stopped (with its code server) on exit."""
    log_path = Path(log_dir) / "webserver.log"
    base = None
    proc = None
    try:
        for _attempt in range(3):  # the free port can be taken between our probe and its bind
            port = free_port()
            base = f"http://127.0.0.1:{port}"
            log = open(log_path, "ab")
            try:
                proc = _start(
                    [sys.executable, "-m", "dagster_webserver", "-h", "127.0.0.1", "-p", str(port),
                     "-w", str(WORKSPACE)],
                    env=env, cwd=REPO, log=log,
                )
            finally:
                log.close()
            if _wait_server_info(proc, base, startup_timeout):
                break
            if proc.poll() is None:  # still running, never answered: no point in another port
                raise UIError(f"dagster-webserver did not answer {base}/server_info within "
                              f"{startup_timeout:.0f} s\n{_tail(log_path)}")
            stop(proc)
            proc = None
        else:
            raise UIError(f"dagster-webserver would not start:\n{_tail(log_path)}")
        _wait_location_loaded(base, startup_timeout, log_path)
        yield base
    finally:
        stop(proc)


def _wait_server_info(proc, base: str, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(f"{base}/server_info", timeout=5) as resp:
                if resp.status == 200 and "dagster_webserver_version" in json.load(resp):
                    return True
        except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError, OSError):
            pass
        time.sleep(0.5)
    return False


def _wait_location_loaded(base: str, timeout: float, log_path: Path) -> None:
    deadline = time.monotonic() + timeout
    status = None
    while time.monotonic() < deadline:
        data = graphql(base, LOCATION_STATUS)["locationStatusesOrError"]
        entries = {e["name"]: e["loadStatus"] for e in data.get("entries", [])}
        status = entries.get(LOCATION)
        if status == "LOADED":
            loaded = graphql(base, LOCATION_ERROR, {"name": LOCATION})["workspaceLocationEntryOrError"]
            err = (loaded.get("locationOrLoadError") or {})
            if err.get("__typename") == "PythonError":
                raise UIError(f"code location {LOCATION} failed to load: {err['message']}\n{err['stack']}")
            return
        time.sleep(0.5)
    raise UIError(f"code location {LOCATION} not loaded after {timeout:.0f} s (status {status})\n"
                  f"{_tail(log_path)}")


# Every asset node of the workspace with its dependency edges, partitions, and its checks' latest
# execution (the one that targets the latest materialization). Shapes from dagster_graphql 1.13.27
# (schema/asset_graph.py GrapheneAssetNode, schema/asset_checks.py GrapheneAssetCheck).
ASSET_GRAPH = """
query AssetGraph {
  assetNodes {
    assetKey { path }
    groupName
    isPartitioned
    partitionKeys
    dependencyKeys { path }
    dependedByKeys { path }
    repository { name location { name } }
    assetChecksOrError {
      __typename
      ... on AssetChecks {
        checks {
          name
          blocking
          executionForLatestMaterialization {
            runId status partition
            evaluation { success severity partition }
          }
        }
      }
    }
  }
}"""

# The newest execution of one check for one partition (Query.assetCheckExecutions, newest first),
# with its evaluation and the materialization it judged.
CHECK_EXECUTIONS = """
query CheckExecutions($assetKey: AssetKeyInput!, $checkName: String!, $partition: String) {
  assetCheckExecutions(assetKey: $assetKey, checkName: $checkName, partition: $partition, limit: 1) {
    id runId status partition stepKey timestamp
    evaluation {
      checkName success severity description partition
      assetKey { path }
      targetMaterialization { runId storageId timestamp }
    }
  }
}"""

# The latest materialization of one partition of an asset: the run that made it and its report.
LATEST_MATERIALIZATION = """
query LatestMaterialization($assetKey: AssetKeyInput!, $partition: String!) {
  assetNodeOrError(assetKey: $assetKey) {
    __typename
    ... on AssetNode {
      latestMaterializationByPartition(partitions: [$partition]) {
        runId partition timestamp
        metadataEntries {
          label
          ... on TextMetadataEntry { text }
          ... on BoolMetadataEntry { boolValue }
          ... on IntMetadataEntry { intValue }
        }
      }
    }
  }
}"""


# ------------------------------------------------------------------------------- Chromium over CDP

class Page:
    """One tab, driven over its DevTools websocket (``websockets`` comes with dagster-webserver)."""

    def __init__(self, ws_url: str):
        from websockets.sync.client import connect

        # entered as a context manager (what websockets >= 17 asks for), left in close()
        self._conn = connect(ws_url, max_size=64 * 2**20, open_timeout=30, origin=None)
        self._ws = self._conn.__enter__()
        self._next_id = 0

    def close(self):
        with contextlib.suppress(Exception):
            self._conn.__exit__(None, None, None)

    def send(self, method: str, timeout: float = 60.0, **params):
        self._next_id += 1
        msg_id = self._next_id
        self._ws.send(json.dumps({"id": msg_id, "method": method, "params": params}))
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise UIError(f"no answer to {method} within {timeout:.0f} s")
            msg = json.loads(self._ws.recv(timeout=remaining))
            if msg.get("id") == msg_id:
                if "error" in msg:
                    raise UIError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            # events (we enable none on purpose) and stale answers are dropped

    def set_viewport(self, width: int, height: int, scale: float = 1.0):
        self.send("Emulation.setDeviceMetricsOverride", width=width, height=height,
                  deviceScaleFactor=scale, mobile=False)

    def goto(self, url: str, timeout: float = 60.0):
        """Navigate and wait for the new document to finish loading (its scripts, not the data the
        page then fetches: wait for that with ``wait_for``)."""
        result = self.send("Page.navigate", url=url)
        if result.get("errorText"):
            raise UIError(f"navigating to {url}: {result['errorText']}")
        self.wait_for(f"location.href.startsWith({json.dumps(url.split('?')[0])}) && "
                      "document.readyState === 'complete'", timeout, f"{url} loaded", settle=0)

    def evaluate(self, expression: str):
        result = self.send("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise UIError(f"evaluating {expression[:80]!r}: {result['exceptionDetails'].get('text')}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float, what: str, settle: float = 1.0):
        """Poll ``expression`` until it is truthy; then give the page ``settle`` seconds to finish
        painting (fonts, edges) and return the value."""
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            with contextlib.suppress(UIError):
                last = self.evaluate(expression)
                if last:
                    if settle:
                        time.sleep(settle)
                    return last
            time.sleep(0.2)
        text = ""
        with contextlib.suppress(UIError):
            text = (self.evaluate("document.body ? document.body.innerText : ''") or "")[:1500]
        raise UIError(f"page never showed {what} within {timeout:.0f} s (last: {last!r}); page text:\n{text}")

    def screenshot(self, path: Path, clip: dict | None = None) -> bytes:
        import base64

        params = {"format": "png", "captureBeyondViewport": False}
        if clip:
            params["clip"] = {"scale": 1, **clip}
        data = base64.b64decode(self.send("Page.captureScreenshot", **params)["data"])
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_bytes(data)
        return data


@contextlib.contextmanager
def chromium(binary: str, startup_timeout: float = 60.0):
    """Headless Chromium with a fresh profile, DevTools on a loopback port it picks itself; yields a
    ``Page``. The browser (its whole process group) and its profile are gone on exit."""
    profile = Path(tempfile.mkdtemp(prefix="whileai-ui-chromium-"))
    log_path = profile.parent / f"{profile.name}.log"
    proc = page = None
    try:
        with open(log_path, "wb") as log:
            proc = _start(
                [binary, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "--remote-debugging-address=127.0.0.1",
                 "--remote-debugging-port=0", "--window-size=1600,1000", "about:blank"],
                log=log,
            )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + startup_timeout
        while not (port_file.is_file() and port_file.read_text().strip()):
            if proc.poll() is not None:
                raise UIError(f"chromium exited {proc.returncode} at start:\n{_tail(log_path)}")
            if time.monotonic() > deadline:
                raise UIError(f"chromium wrote no DevToolsActivePort within {startup_timeout:.0f} s\n"
                              f"{_tail(log_path)}")
            time.sleep(0.2)
        port = int(port_file.read_text().split()[0])
        req = urllib.request.Request(f"http://127.0.0.1:{port}/json/new?about:blank", method="PUT")
        with urllib.request.urlopen(req, timeout=30) as resp:
            target = json.load(resp)
        page = Page(target["webSocketDebuggerUrl"])
        yield page
    finally:
        if page is not None:
            page.close()
        stop(proc, grace=5.0)
        shutil.rmtree(profile, ignore_errors=True)
        with contextlib.suppress(OSError):
            log_path.unlink()


# The lineage graph is drawn once the layout (a web worker) is done: an SVG with the edges and one
# node per asset, its name in the node. This expression is truthy when all five names are inside the
# graph's SVG and at least the four edges are drawn.
LINEAGE_READY = """
(() => {
  const names = %s;
  const svgs = [...document.querySelectorAll('svg')];
  const graph = svgs.find(s => names.every(n => (s.textContent || '').includes(n)));
  if (!graph) return false;
  if (graph.querySelectorAll('foreignObject').length < names.length) return false;
  const edges = [...graph.querySelectorAll('path')].filter(p => !p.closest('marker')).length;
  return edges >= %d ? {edges} : false;
})()
""" % (json.dumps(list(ASSETS)), len(EDGES))


# The export nodes of the lineage graph show their check status once the live data is in
# ("3 / 3 Passed" with the non-blocking format check, "2 / 2 Passed" without it).
EXPORT_NODES_PASSED = """
(() => {
  const nodes = [...document.querySelectorAll('svg foreignObject')].map(f => f.textContent || '');
  const exports = %s;
  const texts = exports.map(n => nodes.find(t => t.startsWith(n)) || '');
  const allPassed = t => { const m = t.match(/(\\d+) \\/ (\\d+) Passed/); return !!m && m[1] === m[2]; };
  return texts.every(allPassed) ? texts : false;
})()
""" % json.dumps(list(EXPORTS))


def lineage_url(base: str) -> str:
    return f"{base}/locations/{REPOSITORY}@{LOCATION}/asset-groups/{GROUP}"


def asset_url(base: str, asset: str, view: str = "overview", partition: str | None = PARTITION) -> str:
    url = f"{base}/assets/{asset}?view={view}"
    return url + (f"&partition={partition}" if partition else "")


# ------------------------------------------------------------------------------------- PNG decoding

def decode_png(data: bytes):
    """``(width, height, channels, rows)`` of an 8-bit, non-interlaced grey/RGB/RGBA PNG, ``rows`` a
    list of ``bytes`` (one per scanline, unfiltered). Enough for Chromium's screenshots; zlib only."""
    if data[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    pos, idat, ihdr = 8, [], None
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos:pos + 4])
        kind = data[pos + 4:pos + 8]
        body = data[pos + 8:pos + 8 + length]
        if zlib.crc32(kind + body) != struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0]:
            raise ValueError(f"bad CRC in {kind!r} chunk")
        if kind == b"IHDR":
            ihdr = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat.append(body)
        elif kind == b"IEND":
            break
        pos += 12 + length
    if ihdr is None:
        raise ValueError("no IHDR")
    width, height, depth, color, _comp, _filt, interlace = ihdr
    channels = {0: 1, 2: 3, 4: 2, 6: 4}.get(color)
    if depth != 8 or channels is None or interlace:
        raise ValueError(f"unsupported PNG: depth {depth}, color type {color}, interlace {interlace}")
    raw = zlib.decompress(b"".join(idat))
    stride = width * channels
    if len(raw) != height * (stride + 1):
        raise ValueError("truncated image data")
    rows, prev = [], bytes(stride)
    for y in range(height):
        ftype = raw[y * (stride + 1)]
        line = bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        if ftype == 1:  # Sub
            for i in range(channels, stride):
                line[i] = (line[i] + line[i - channels]) & 0xFF
        elif ftype == 2:  # Up
            line = bytearray((a + b) & 0xFF for a, b in zip(line, prev))
        elif ftype == 3:  # Average
            for i in range(stride):
                left = line[i - channels] if i >= channels else 0
                line[i] = (line[i] + ((left + prev[i]) >> 1)) & 0xFF
        elif ftype == 4:  # Paeth
            for i in range(stride):
                a = line[i - channels] if i >= channels else 0
                b = prev[i]
                c = prev[i - channels] if i >= channels else 0
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                pred = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
                line[i] = (line[i] + pred) & 0xFF
        elif ftype != 0:
            raise ValueError(f"bad filter type {ftype} on row {y}")
        prev = bytes(line)
        rows.append(prev)
    return width, height, channels, rows


def image_stats(data: bytes) -> dict:
    """Size, number of distinct colours, and the share of pixels that differ from the most common
    colour (the page background): a blank or single-colour page has ~1 colour and ~0 %."""
    width, height, channels, rows = decode_png(data)
    counts: dict[bytes, int] = {}
    px = channels if channels >= 3 else 1
    for row in rows:
        for i in range(0, len(row), px):
            key = row[i:i + 3] if px >= 3 else row[i:i + 1]
            counts[key] = counts.get(key, 0) + 1
    total = width * height
    background = max(counts.values())
    return {"width": width, "height": height, "colors": len(counts),
            "non_background": (total - background) / total}
