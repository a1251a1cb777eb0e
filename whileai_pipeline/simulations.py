"""The exporter API, in one import: ``import whileai_pipeline.simulations as wai``.

Same names, signatures, defaults, error tokens and report keys as the reference SDK's export
surface (see the spec), with the deliberate differences docs/API_CONTRACT.md lists (its "DECISIONS N"
points; DECISIONS.md itself is not in this repository). Pure Python: no Dagster here.
"""

from .core.conversation import conversation
from .core.errors import (BadJsonlError, BadRowError, ExportError, GateError, JudgeStalledError,
                          NoPreferencePairsError, OutputIsSourceError, PrivilegedLeakError, RoundtripInvalidError,
                          SchemaInvalidError, SourceChangedError, WorkerLostError, WriteFailedError)
from .core.export import (export_dataset, export_datasets, export_preference, export_preferences, export_training,
                          iter_training_rows, training_rows)
from .core.gates import FORMATS as EXPORT_FORMATS, leak_report, scrub, tool_call_roundtrip
from .core.jsonl import read_jsonl, write_jsonl
from .core.judge import judge_pairs
from .core.masks import MASK_MODES, loss_mask
from .core.pairs import build_preference_pairs
from .core.runs import Profile, Run, load_run, sidecar_path
from .core.trl import to_trl

__all__ = [
    "BadJsonlError", "BadRowError", "EXPORT_FORMATS", "ExportError", "GateError", "JudgeStalledError", "MASK_MODES",
    "NoPreferencePairsError",
    "OutputIsSourceError", "PrivilegedLeakError", "Profile", "RoundtripInvalidError", "Run", "SchemaInvalidError",
    "SourceChangedError", "WorkerLostError",
    "build_preference_pairs", "conversation", "export_dataset", "export_datasets", "export_preference",
    "export_preferences", "export_training",
    "iter_training_rows", "judge_pairs", "leak_report", "load_run", "loss_mask", "read_jsonl", "scrub",
    "sidecar_path", "to_trl", "tool_call_roundtrip", "training_rows", "write_jsonl", "WriteFailedError",
]
