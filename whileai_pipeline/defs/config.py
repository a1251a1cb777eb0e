"""Run config: every exporter option, with the library's defaults, on the asset that uses it.

Each asset takes only the options it reads, so the launchpad shows them where they act:

==========================  =============================================================
asset                       options
==========================  =============================================================
raw_simulation_data         on_bad_line
scored_simulation_data      scorer
preference_pairs            max_pairs_per_prompt, min_margin, length_match, judge, judge_concurrency,
                            judge_timeout
sft_export                  formats, mask_mode, unroll, strip_think, max_tool_output_chars,
                            validate, sft_rows
dpo_export                  formats, strip_think, validate, drop_ties
==========================  =============================================================

``flat_to_run_config`` turns one flat mapping of these names (the CLI's ``--config`` file) into a
Dagster run config, sending shared names (formats, strip_think, validate) to both exports.
"""

import difflib
import enum
import os
from typing import List, Optional

import dagster as dg
import pydantic
from pydantic import Field, field_validator

from whileai_pipeline.core.gates import FORMATS
from whileai_pipeline.core.judge import check_timeout
from whileai_pipeline.core.pairs import check_min_margin
from whileai_pipeline.core.scoring import BUILTIN_SCORERS


class OnBadLine(enum.Enum):
    fail = "fail"
    quarantine = "quarantine"


class MaskMode(enum.Enum):
    assistant = "assistant"
    final = "final"


SFT_ROWS = ("pass", "all")


def _check_formats(value):
    if not value:
        raise ValueError("formats must name at least one of 'openai', 'trl'")
    bad = [f for f in value if f not in FORMATS]
    if bad:
        raise ValueError(f"formats must be drawn from {FORMATS}, got {bad!r}")
    if len(set(value)) != len(value):
        raise ValueError(f"formats lists a format twice, got {value!r}")
    return list(value)


def _check_callable_spec(value, what, allow_builtin=()):
    value = (value or "").strip()
    if value in allow_builtin:
        return value
    if value.count(":") != 1 or not all(value.split(":")):
        choices = " or ".join([*(repr(b) for b in allow_builtin), "'module:function'"])
        raise ValueError(f"{what} must be {choices}, got {value!r}")
    return value


FIX_RUN_CONFIG = "Nothing was changed by this step: fix the run config and launch the run again."


class OptionsFailure(dg.Failure):
    """An option value an asset's config class refuses, as the failure of the step that was given it; ``error`` is
    pydantic's ValidationError."""

    def __init__(self, description, error):
        super().__init__(description=description)
        self.error = error


class _Options(dg.Config):
    """An asset's options. Dagster builds the config object in the step, before the asset's code (and its check
    of the whole run config) runs: a value the validators refuse would fail the step as an error in user code,
    pydantic's text in a stack trace. It fails as a ``Failure`` with the one-line message instead."""

    def __init__(self, **data):
        try:
            super().__init__(**data)
        except pydantic.ValidationError as exc:
            asset = next((name for name, cls in CONFIG_CLASSES.items() if cls is type(self)), type(self).__name__)
            raise OptionsFailure(f"bad value for {asset}: {_describe(exc)}. {FIX_RUN_CONFIG}", exc) from None


class RawConfig(_Options):
    on_bad_line: OnBadLine = Field(
        default=OnBadLine.fail,
        description="fail: an unreadable line fails the step with file:line. quarantine: it is "
        "written to stages/<run>/quarantine.jsonl, counted, and the other rows go on.",
    )


class ScoreConfig(_Options):
    scorer: str = Field(
        default="existing",
        description="existing (keep each row's reward), reference_match (final answer vs. "
        "privileged.reference, normalized) or module:function returning a reward or {reward, reason}.",
    )

    @field_validator("scorer")
    @classmethod
    def _scorer(cls, value):
        return _check_callable_spec(value, "scorer", BUILTIN_SCORERS)


class PairsConfig(_Options):
    max_pairs_per_prompt: int = Field(default=1, description="Pairs at most per prompt group.")
    min_margin: float = Field(default=1.0, description="Smallest chosen-minus-rejected reward (> 0).")
    length_match: bool = Field(default=True, description="Pick the rejected reply closest in length.")
    judge: str = Field(
        default="",
        description="Optional pairwise judge module:function(a_row, b_row) -> {winner: A|B|tie}; "
        "empty: no judging. Pairs the judge cannot separate become ties.",
    )
    judge_concurrency: int = Field(
        default=1,
        description="Pairs the judge is asked about at once (threads). 1 keeps a stateful judge's calls in "
        "order; a judge that calls a remote model gains from 8 or so.",
    )

    judge_timeout: Optional[float] = Field(
        default=None,
        description="Seconds one judge call may take before it counts as a failed judgment; null: no limit, "
        "and each call runs on the step's own thread. Set it for a judge that calls a remote model: a stalled "
        "connection otherwise holds the step, and the run's lock, for good. With it, each call runs in a "
        "thread of its own (a judge keeping thread-bound state, e.g. a sqlite connection, needs null).",
    )

    @field_validator("judge_timeout")
    @classmethod
    def _timeout(cls, value):
        return check_timeout(value)  # the library's rule

    @field_validator("min_margin")
    @classmethod
    def _margin(cls, value):
        check_min_margin(value)  # the library's rule, so a run config fails where build_preference_pairs would
        return value

    @field_validator("max_pairs_per_prompt", "judge_concurrency")
    @classmethod
    def _at_least_one(cls, value, info):
        if value < 1:
            raise ValueError(f"{info.field_name} must be at least 1")
        return value

    @field_validator("judge")
    @classmethod
    def _judge(cls, value):
        return _check_callable_spec(value, "judge", ("",))


class SftExportConfig(_Options):
    formats: List[str] = Field(default=list(FORMATS), description="Any of openai, trl.")
    mask_mode: MaskMode = Field(default=MaskMode.assistant, description="assistant or final.")
    unroll: bool = Field(default=False, description="One sample per assistant turn.")
    strip_think: bool = Field(default=True, description="Remove `<think>` blocks from assistant turns.")
    max_tool_output_chars: Optional[int] = Field(default=None, description="Cut longer tool outputs.")
    validate_gates: bool = Field(
        default=True,
        alias="validate",
        description="True: a failed gate blocks publishing and fails the run. False: export anyway, "
        "checks pass with WARN and the report's warnings say what was let through.",
    )
    sft_rows: str = Field(
        default="pass",
        description="pass: only rows with reward >= 0.5 (the default). all: every scored row "
        "(the report then warns about failing rows).",
    )

    @field_validator("formats")
    @classmethod
    def _formats(cls, value):
        return _check_formats(value)

    @field_validator("max_tool_output_chars")
    @classmethod
    def _cap(cls, value):
        if value is not None and value < 0:
            raise ValueError(f"max_tool_output_chars must be 0 or more (or null for no cut), got {value}: "
                             "a negative cap would erase every tool output")
        return value

    @field_validator("sft_rows")
    @classmethod
    def _sft_rows(cls, value):
        if value not in SFT_ROWS:
            raise ValueError(f"sft_rows must be one of {SFT_ROWS}, got {value!r}")
        return value


class DpoExportConfig(_Options):
    formats: List[str] = Field(default=list(FORMATS), description="Any of openai, trl.")
    strip_think: bool = Field(default=True, description="Remove `<think>` blocks from assistant turns.")
    validate_gates: bool = Field(
        default=True,
        alias="validate",
        description="True: a failed gate blocks publishing and fails the run. False: export anyway.",
    )
    drop_ties: bool = Field(default=True, description="Leave out pairs marked as ties.")

    @field_validator("formats")
    @classmethod
    def _formats(cls, value):
        return _check_formats(value)


# --------------------------------------------------------------------------- flat options

FLAT_OPTIONS = {
    "on_bad_line": ("raw_simulation_data",),
    "scorer": ("scored_simulation_data",),
    "max_pairs_per_prompt": ("preference_pairs",),
    "min_margin": ("preference_pairs",),
    "length_match": ("preference_pairs",),
    "judge": ("preference_pairs",),
    "judge_concurrency": ("preference_pairs",),
    "judge_timeout": ("preference_pairs",),
    "formats": ("sft_export", "dpo_export"),
    "mask_mode": ("sft_export",),
    "unroll": ("sft_export",),
    "strip_think": ("sft_export", "dpo_export"),
    "max_tool_output_chars": ("sft_export",),
    "validate": ("sft_export", "dpo_export"),
    "sft_rows": ("sft_export",),
    "drop_ties": ("dpo_export",),
}
CONFIG_CLASSES = {
    "raw_simulation_data": RawConfig,
    "scored_simulation_data": ScoreConfig,
    "preference_pairs": PairsConfig,
    "sft_export": SftExportConfig,
    "dpo_export": DpoExportConfig,
}


def run_config_options(cls) -> list:
    """The options of config class ``cls`` as its run config spells them (``validate`` not ``validate_gates``)."""
    return [field.alias or name for name, field in cls.model_fields.items()]


def as_run_config(config: dg.Config) -> dict:
    """An asset's config as its run config spells it (``validate`` not ``validate_gates``, an enum by
    name): stored with each materialization, so a re-export can run with the same options."""
    out = {}
    for name, field in type(config).model_fields.items():
        value = getattr(config, name)
        out[field.alias or name] = value.name if isinstance(value, enum.Enum) else value
    return out


def resolved_config(asset_name: str, values) -> dict:
    """The options ``asset_name`` runs with when its run config gives ``values`` (checked values, e.g.
    ``stored_config``'s): every option, the defaults filled in, spelled as ``as_run_config`` stores them.
    The schedule compares it with an export's stored ``config`` to tell whether the export would change."""
    cls = CONFIG_CLASSES[asset_name]
    return as_run_config(cls(**{k: _enum_value(cls, k, v) for k, v in (values or {}).items()}))


NOT_CARRIED = ("validate",)  # a run that turned the gates off does so for itself only


def stored_config(asset_name: str, values) -> Optional[dict]:
    """``values`` (an ``as_run_config`` dict read back from metadata) as the asset's run config today:
    options the asset no longer has are dropped, and a set that fails today's checks gives None.

    ``validate`` is not carried: one launchpad run with ``validate: false`` (to look at a refused
    candidate) would otherwise turn the gates off for every later scheduled re-export and new version."""
    cls = CONFIG_CLASSES.get(asset_name)
    if cls is None or not isinstance(values, dict):
        return None
    known = set(run_config_options(cls))
    values = {k: v for k, v in values.items() if k in known and k not in NOT_CARRIED}
    try:
        _check_op_configs({asset_name: {"config": values}})
    except ConfigFileError:
        return None
    return values


class ConfigFileError(ValueError):
    """A config file the pipeline cannot use (unknown option, wrong value)."""


def flat_to_run_config(options: dict) -> dict:
    """``{"validate": False, "mask_mode": "final"}`` -> ``{"ops": {"sft_export": {"config": ...}, ...}}``.

    A mapping that already has a top-level ``ops`` key is taken as a Dagster run config and passed
    through. Values are checked against the config classes here, so a bad file fails before any run.
    """
    if not isinstance(options, dict):
        raise ConfigFileError(f"a config file must hold a mapping of options, got {type(options).__name__}")
    if "ops" in options:
        _check_op_names(options["ops"])
        _check_op_configs(options["ops"])
        return options
    if said := _dagster_form_without_ops(options):
        raise ConfigFileError(said)
    unknown = sorted(set(options) - set(FLAT_OPTIONS))
    if unknown:
        # "ops" too: a misspelled "ops:" made the file read as flat options, unknown all
        guesses = {name: difflib.get_close_matches(name, [*FLAT_OPTIONS, "ops"], n=1) for name in unknown}
        hint = ", ".join(f"{match[0]!r} for {name!r}" for name, match in guesses.items() if match)
        raise ConfigFileError(f"unknown option(s) {unknown}{f' (did you mean {hint}?)' if hint else ''}; "
                              f"known: {sorted(FLAT_OPTIONS)}")
    per_asset: dict = {}
    for name, value in options.items():
        if name == "formats" and isinstance(value, str):
            value = [value]
        for asset in FLAT_OPTIONS[name]:
            per_asset.setdefault(asset, {})[name] = value
    ops = {}
    for asset, values in per_asset.items():
        _check_values(asset, CONFIG_CLASSES[asset], values)
        ops[asset] = {"config": values}
    return {"ops": ops} if ops else {}


# Dagster run config's top-level keys besides ``ops``: no flat option has their names
RUN_CONFIG_KEYS = ("resources", "execution", "loggers")
PATHS_SHOWN = 4  # ops.<asset>.config.<option> paths an error lists before "..."


def _dagster_form_without_ops(options) -> Optional[str]:
    """What is wrong with a file that has no ``ops:`` but holds Dagster run config's other keys or asset names
    at the top level (Dagster's form without its ``ops:`` section), else None. Read as flat options it was
    "unknown option(s) ['resources']" and a list of flat options, naming neither ``ops:`` nor where to go."""
    assets = [name for name in options if name in CONFIG_CLASSES]
    dagster_keys = [name for name in options if name in RUN_CONFIG_KEYS]
    if not assets and not dagster_keys:
        return None
    flat = [name for name in options if name in FLAT_OPTIONS]
    paths = [f"ops.{asset}.config.{option}" for asset in assets for option in _asset_options(options[asset])]
    paths += [f"ops.{asset}.config.{name}" for name in flat for asset in FLAT_OPTIONS[name]]
    here = ""
    if paths:
        shown = ", ".join(paths[:PATHS_SHOWN]) + (", ..." if len(paths) > PATHS_SHOWN else "")
        here = f" (here: {shown})"
    kinds = [f"{name!r} is an asset" for name in assets] + [f"{name!r} is a key of Dagster's run config"
                                                             for name in dagster_keys]
    said = (f"no 'ops:' section, so the file is read as flat options, but {', '.join(kinds)}: with a top-level "
            f"'ops:' it is taken as Dagster's run config, each asset's options under ops: <asset>: config:{here}")
    if not paths:
        said += " (ops: {} when no asset option is set)"
    steps = [f"lift the options out of {', '.join(map(repr, assets))} to the top level"] if assets else []
    for key in dagster_keys:
        storage = key == "resources" and isinstance(options[key], dict) and "storage" in options[key]
        steps.append(f"leave {key!r} out" + (" (--home DIR gives the storage root)" if storage else ""))
    return f"{said}; or, for flat options, {' and '.join(steps)}"


def _asset_options(block) -> list:
    """The option names of an asset's block given at the top level: under its ``config:`` or right in it."""
    if not isinstance(block, dict):
        return []
    values = block.get("config") if "config" in block else block
    return list(values) if isinstance(values, dict) else []


def _check_op_names(ops) -> None:
    """A misspelled asset or option in an ``ops:`` file, named with the likely one (ConfigFileError). Dagster's
    own error names the entry too, but then prints the whole job's config schema on one line. A name close to
    no asset's is left to Dagster: the gates' checks are ops of the job too."""
    if not isinstance(ops, dict):
        return
    for name, block in ops.items():
        cls = CONFIG_CLASSES.get(name)
        if cls is None:
            match = difflib.get_close_matches(str(name), CONFIG_CLASSES, n=1)
            if match:
                raise ConfigFileError(f"unknown asset {name!r} under ops: (did you mean {match[0]!r}?); the assets "
                                      f"that take options: {', '.join(CONFIG_CLASSES)}")
            continue
        values = block.get("config") if isinstance(block, dict) else None
        if not isinstance(values, dict):
            continue
        known = run_config_options(cls)
        for option in values:
            if option not in known:
                match = difflib.get_close_matches(str(option), known, n=1)
                hint = f" (did you mean {match[0]!r}?)" if match else ""
                raise ConfigFileError(f"unknown option {option!r} under ops: {name}: config:{hint}; "
                                      f"{name}'s options: {', '.join(known)}")


def check_run_config(run_config) -> None:
    """A Dagster run config's option values, checked as ``flat_to_run_config`` checks a file's
    (ConfigFileError): what the launchpad, a schedule or ``dagster asset materialize -c`` launched."""
    _check_op_configs((run_config or {}).get("ops") if isinstance(run_config, dict) else None)


def _check_op_configs(ops):
    """A run config in Dagster's own form gets the checks a flat file gets, before any run: Dagster
    would check the types, but not the values (``min_margin: -1`` failed three steps into the run)."""
    if not isinstance(ops, dict):
        return  # Dagster says what is wrong with the shape
    for asset, block in ops.items():
        cls = CONFIG_CLASSES.get(asset)
        values = block.get("config") if isinstance(block, dict) else None
        if cls is None or not isinstance(values, dict):
            continue
        _check_values(asset, cls, values)


def _check_values(asset, cls, values):
    """``values`` as ``asset``'s config class ``cls`` takes them, else a one-line ConfigFileError."""
    values = {k: _from_env(asset, cls, k, v) for k, v in values.items()}
    try:
        cls(**{k: _enum_value(cls, k, v) for k, v in values.items()})
    except Exception as exc:  # OptionsFailure (pydantic's ValidationError) and our ValueErrors
        raise ConfigFileError(f"bad value for {asset}: {_describe(getattr(exc, 'error', exc))}") from None


def _describe(exc) -> str:
    """``exc`` on one line, ``option: what is wrong (got value)`` per bad option, ``; `` between. A pydantic
    ValidationError's own text names the config class and adds ``[type=...]`` and a pydantic.dev link,
    which tell a user of the config file nothing."""
    errors = getattr(exc, "errors", None)
    if not callable(errors):
        return str(exc)
    try:
        items = errors(include_url=False)
    except TypeError:
        items = errors()
    parts = []
    for item in items:
        where = ".".join(str(part) for part in item.get("loc", ())) or "value"
        message = str(item.get("msg", "invalid")).removeprefix("Value error, ")
        if message.startswith(f"{where} "):  # our validators already name the option
            text = message
        else:
            text = f"{where}: {message}"
        if "input" in item and not isinstance(item["input"], dict) and "got " not in message:
            text += f" (got {item['input']!r})"
        parts.append(text)
    return "; ".join(parts) or str(exc)


def _env_name(value):
    """NAME of Dagster's ``{env: NAME}`` (a value its run config reads from the environment), else None."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get("env"), str):
        return value["env"]
    return None


def env_text(value):
    """``value``, or the text of the environment variable it names when it is Dagster's ``{env: NAME}`` (None
    when that variable is not set): for code that reads a text option of a run config before Dagster does."""
    name = _env_name(value)
    return value if name is None else os.environ.get(name)


def _from_env(asset, cls, key, value):
    """``value`` as the step gets it: Dagster reads ``{env: NAME}`` (for a text, integer or boolean option, or a
    ``formats`` entry) from the environment and converts it as here (``IntSource``, ``BoolSource``), so the
    checks see the value, not the mapping. A variable that is not set is said here, as Dagster says it."""
    if isinstance(value, list):
        return [_from_env(asset, cls, key, item) for item in value]
    name = _env_name(value)
    if name is None:
        return value
    text = os.environ.get(name)
    if text is None:
        raise ConfigFileError(f"bad value for {asset}: {key} is read from the environment variable {name}, "
                              "which is not set")
    field = cls.model_fields.get("validate_gates" if key == "validate" else key)
    annotation = getattr(field, "annotation", None)
    if annotation is bool:
        return text.lower() not in ("false", "none", "0", "")  # as Dagster's BoolSource reads it
    if annotation in (int, Optional[int]):
        try:
            return int(text)
        except ValueError:
            raise ConfigFileError(f"bad value for {asset}: {key} must be an integer, but the environment "
                                  f"variable {name} holds {text!r}") from None
    return text


def _enum_value(cls, key, value):
    """Let pydantic see an enum member for enum fields (run config spells them by member name)."""
    field = cls.model_fields.get("validate_gates" if key == "validate" else key)
    annotation = getattr(field, "annotation", None)
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        if not isinstance(value, str) or value not in annotation.__members__:
            raise ConfigFileError(f"{key} must be one of {[m.value for m in annotation]}, got {value!r}")
        return annotation[value]
    return value
