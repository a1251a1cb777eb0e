"""Whether a run's exports would come out the same as their last materializations, without reading a stage.

An export's files depend on the stage it reads (and its sidecar), on its options and on the code. Each
export materialization records all three (``inputs``, ``config``, ``code_fingerprint``), and what it left
in ``published/`` (``outputs``), so a published file removed or edited by hand is exported again. When
both exports' latest materializations record what a re-export would run with now, that re-export rewrites
byte-identical files (status ``unchanged``), and the schedule leaves the run out: each such re-export
cost a run worker, a full read of the stages (seconds to tens of seconds for a big run) and some 400 KB
of event log.
"""

from typing import Optional

from . import journal
from .assets import CHAIN_STAGES, EXPORT_STAGES, export_inputs, export_outputs, step_inputs
from .config import resolved_config


def why_reexport(storage, key, run_config, latest, fingerprint) -> Optional[str]:
    """Why run ``key`` must be re-exported (a few words for the tick log), or None when neither export
    would change. ``run_config``: what the schedule would request for it; ``latest``:
    ``stored_options.latest_materializations`` of the exports; ``fingerprint``: today's ``code_fingerprint``."""
    if journal.pending(storage.stage_dir(key)):
        # a step killed before its renames: the next step puts its files in place before it reads them
        # (new rows under the same stage names), which the stage files' signatures cannot tell
        return "a killed step left renames to finish"
    ops = run_config.get("ops") or {}
    reasons = {}
    for name in EXPORT_STAGES:
        record = latest.get(name, {}).get(key)
        metadata = record.asset_materialization.metadata if record is not None else None
        values = (ops.get(name) or {}).get("config") or {}
        why = _why_export_again(name, metadata, export_inputs(storage, key, name), export_outputs(storage, key, name),
                                values, fingerprint)
        if why:
            reasons[name] = why
    if not reasons:
        return None
    if len(reasons) == len(EXPORT_STAGES) and len(set(reasons.values())) == 1:
        return next(iter(reasons.values()))  # both for the same reason: said once
    return "; ".join(f"{name}: {why}" for name, why in reasons.items())


def _why_export_again(name, metadata, inputs, outputs, values, fingerprint) -> Optional[str]:
    """Why export ``name`` would not come out as its latest materialization (``metadata``, None when there is
    none) did, or None when it recorded these ``inputs``, left these ``outputs`` in ``published/``, and
    recorded the options the run config ``values`` give and the code ``fingerprint``."""
    if metadata is None:
        return "never exported"
    recorded = {entry: metadata[entry].value if entry in metadata else None
                for entry in ("code_fingerprint", "inputs", "outputs", "config")}
    if any(value is None for value in recorded.values()):
        return "last exported by a version that did not record its inputs"
    if recorded["code_fingerprint"] != fingerprint:
        return "new code"
    if recorded["inputs"] != inputs:
        return f"{EXPORT_STAGES[name]} stage changed"
    if recorded["outputs"] != outputs:
        return "published files changed since"
    now = resolved_config(name, values)
    before = recorded["config"]
    if before == now:
        return None
    if isinstance(before, dict) and before.get("validate") is False and now.get("validate"):
        return "last exported with validate: false"
    changed = sorted(option for option in set(now) | set(before if isinstance(before, dict) else {})
                     if not isinstance(before, dict) or before.get(option) != now.get(option))
    return f"other options ({', '.join(changed)})"


def chain_stopped_at(storage, key, latest) -> Optional[str]:
    """The first step of run ``key``'s chain (``CHAIN_STAGES``) whose latest materialization read another stage
    than the one there now, or None: a newer version of the run whose chain failed at that step (a scorer that
    raised, a judge that was down). Its exports are of the earlier version, and re-exporting them from the
    stages the chain left would not change that. ``latest``: ``stored_options.latest_materializations`` of the
    chain's steps. A step materialized by a version that did not record its inputs is taken as read."""
    for name in CHAIN_STAGES:
        record = latest.get(name, {}).get(key)
        recorded = record.asset_materialization.metadata.get("inputs") if record is not None else None
        if recorded is not None and recorded.value != step_inputs(storage, key, name):
            return name
    return None
