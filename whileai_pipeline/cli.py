"""``whileai-pipeline``: run the Dagster chain on one run file, in this process, with no server.

    whileai-pipeline run PATH [--config FILE] [--name NAME] [-v]   register PATH and materialize the chain
    whileai-pipeline demo [--config FILE] [-v]                     the same for the bundled sample run
    whileai-pipeline register PATH [--name NAME]                   only copy into the inbox + add the partition
    whileai-pipeline validate FILE --format openai|trl             check an export against its consumer's rules

Exit codes: 0 success; 1 the run failed (a gate blocked an export, a step failed on the data, or
the disk under the storage root is full); 2 bad usage (missing file, unreadable or invalid config
file, a run file still being written, a bad ``$WHILEAI_PIPELINE_CRON``, ``$WHILEAI_PIPELINE_WORKERS``,
``$WHILEAI_PIPELINE_PROGRESS_SECONDS`` or ``$WHILEAI_PIPELINE_LOCK_TIMEOUT``, a ``$DAGSTER_HOME`` whose
instance cannot be opened); 130 interrupted (Ctrl-C).

Dagster instance: ``$DAGSTER_HOME`` when it is set (the same instance ``dagster dev`` uses), else a
persistent embedded SQLite instance in ``<root>/dagster_home``, created on first use. That keeps
partitions and run history across invocations on a fresh machine with no server and no setup; set
``DAGSTER_HOME=<root>/dagster_home`` to open the same history in the UI.

Storage root: ``--home``, else ``$WHILEAI_PIPELINE_HOME``, else ``./whileai_data``.
"""

import argparse
import contextlib
import io
import logging
import os
import re
import sys
import tempfile
import warnings
from pathlib import Path

from whileai_pipeline.core.exit_codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE

SAMPLE_RUN = Path(__file__).resolve().parent / "sample" / "support_orders.jsonl"


class UsageError(Exception):
    pass


def _run_file(path) -> Path:
    """``path`` as a Path, or a UsageError saying why it is not a run file (missing, a directory, a run's
    sidecar or progress file)."""
    from whileai_pipeline.core.jsonl import compressed_file, require_file
    from whileai_pipeline.core.runs import PROGRESS_SUFFIX
    from whileai_pipeline.defs.publishing import report_file

    path = Path(path).expanduser()  # a quoted "~/runs/x.jsonl": the shell left the ~ as it is
    for suffix, what in ((".meta.json", "the sidecar of a run (its system prompt and tools), read with the run"),
                         (".jsonl" + PROGRESS_SUFFIX, "simulate's progress file of a run")):
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            run = path.with_name(path.name[:-len(suffix)] + ".jsonl")
            raise UsageError(f"{path} is {what}, not a run: pass the run's .jsonl file ({run})")
    if path.name.endswith(".report.json") and _is_export_report(path):
        raise UsageError(f"{path} is the report of an export, not a run: pass the run file it was made from")
    try:
        require_file(path, "run file", "pass the path of a .jsonl run")
    except OSError as exc:
        raise UsageError(str(exc)) from None
    if packed := compressed_file(path):  # read as text, its first line would be "invalid UTF-8 ... fix that line"
        kind, tool = packed
        raise UsageError(f"{path} is {kind}-compressed, not a JSONL run: decompress it first (e.g. {tool} {path}) "
                         "and pass the .jsonl file it gives")
    report = report_file(path)
    if path.name.endswith(".jsonl") and _is_export_report(report):
        # exported again, its rows would be read as conversations (SFT: each message's weight dropped) or
        # as nothing (DPO), and the run would pass with a leak check that read nothing
        raise UsageError(f"{path} is a training file this pipeline exported ({report.name} beside it is its "
                         "report), not a simulation run: pass the run file it was made from")
    return path


REPORT_MAX_BYTES = 64 << 20


def _is_export_report(path) -> bool:
    """Whether ``path`` is the report a published export carries beside it (its format, what it read and
    the digest of what it wrote), not some other JSON file of that name."""
    import orjson

    from whileai_pipeline.core.gates import FORMATS

    try:
        if os.path.getsize(path) > REPORT_MAX_BYTES:  # not a report of ours: not worth reading whole
            return False
        with open(path, "rb") as fh:
            report = orjson.loads(fh.read())
    except (OSError, ValueError):
        return False
    return isinstance(report, dict) and report.get("format") in FORMATS and {
        "source_sha256", "sha256", "n_written"} <= report.keys()


def _storage(home, fix=None):
    """The storage under ``home`` (else ``$WHILEAI_PIPELINE_HOME`` or ./whileai_data), its root created;
    a UsageError when that root cannot be a folder of ours (a file there, no such place, no rights), saying to
    ``fix`` it (``_root_fix``: a root the config file names), else to pass --home or set the variable."""
    from whileai_pipeline.defs.resources import ENV_HOME, PipelineStorage

    storage = PipelineStorage(root=str(home) if home else None)
    try:
        storage.base.mkdir(parents=True, exist_ok=True)
        if not os.access(storage.base, os.W_OK | os.X_OK):
            raise PermissionError("not writable")
    except OSError as exc:
        is_file = storage.base.exists() and not storage.base.is_dir()
        reason = "a file is there, not a folder" if is_file else exc.strerror or str(exc)
        fix = fix or f"pass --home DIR, or set ${ENV_HOME}"
        raise UsageError(f"cannot keep the pipeline's files under {storage.base} ({reason}): {fix}, naming a folder "
                         "you can write") from None
    return storage


def _not_being_simulated(path):
    """A UsageError when ``simulate`` says it is still writing the run (``simulate_stage``): exported now,
    it would be a part of the run, without the sidecar ``simulate`` writes last."""
    from whileai_pipeline.core.runs import SIMULATE_DONE, progress_path, simulate_stage

    stage = simulate_stage(path)
    if stage is not None:
        progress = progress_path(path)
        raise UsageError(f"{path}: simulate is still writing this run ({progress.name} says stage {stage!r}, not "
                         f"{SIMULATE_DONE!r}); run this again once simulate has finished, or delete {progress} if no "
                         "simulate is writing the run any more")


def _run_key(path, name) -> str:
    """The run name a command will use: ``--name`` (only a .jsonl suffix dropped), else the file's."""
    from whileai_pipeline.defs.resources import partition_key_for, partition_key_for_name

    if name is not None and not name.strip():
        raise UsageError(f"--name is empty ({name!r}): give the run a name, or leave --name out to name it after "
                         "the file")
    try:
        return partition_key_for_name(name) if name is not None else partition_key_for(path)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def _load_config_file(path) -> dict:
    path = Path(path).expanduser()  # --config=~/x.yaml: the shell expands no ~ after "="
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a config file: pass a YAML or JSON file of options")
    if not path.is_file():
        raise UsageError(f"no such config file: {path}")
    try:
        if path.suffix.lower() == ".json":
            import orjson

            data = orjson.loads(path.read_bytes())
        else:
            import yaml

            data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception as exc:  # orjson.JSONDecodeError, yaml.YAMLError, UnicodeDecodeError
        raise UsageError(f"cannot parse config file {path}: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise UsageError(f"config file {path} must hold a mapping of options, got {type(data).__name__}")
    return data


def _instance(storage, out=None):
    import dagster as dg
    import yaml

    dagster_home = os.environ.get("DAGSTER_HOME")
    if dagster_home:
        home = Path(dagster_home).expanduser()
        if not home.is_absolute():
            raise UsageError(f"DAGSTER_HOME must be an absolute path, got {dagster_home!r}")
        unset = f"or unset DAGSTER_HOME to use the embedded instance under {storage.dagster_home}"
        try:
            blocker = next((p for p in (home, *home.parents) if p.exists()), None)
        except OSError as exc:  # a folder on the way that this user may not enter
            raise UsageError(f"cannot reach DAGSTER_HOME={home} ({exc.strerror or exc}): point it at a folder you "
                             f"can write, {unset}") from None
        if blocker is not None and not blocker.is_dir():
            where = "is a file" if blocker == home else f"is below {blocker}, a file"
            raise UsageError(f"DAGSTER_HOME={home} {where}, not a folder: point it at the folder that holds (or is "
                             f"to hold) the Dagster instance, {unset}")
        created = blocker != home  # the first path that exists on the way up is not DAGSTER_HOME itself
        try:
            home.mkdir(parents=True, exist_ok=True)  # Dagster wants it to exist (a CI job's first command)
            instance = dg.DagsterInstance.get()
            instance.get_runs(limit=1)  # a database opened lazily must answer too
        except Exception as exc:  # its dagster.yaml is not YAML or sets what Dagster refuses, a variable it
            # names is unset, its database unreachable, ...
            if isinstance(exc, yaml.YAMLError):
                advice = "Fix that file's YAML"
            elif isinstance(exc, dg.DagsterInvalidConfigError):
                advice = "Fix that setting in the file (or set the environment variable it names)"
            else:
                advice = ("Set what that file names (e.g. the DAGSTER_PG_* variables) and check that its database "
                          "can be reached")
            raise UsageError(f"cannot open the Dagster instance of DAGSTER_HOME={home} ({home / 'dagster.yaml'}): "
                             f"{_instance_error(exc)}. {advice}, {unset}") from None
        if created:  # a mistyped path starts a history of its own, which nothing else reads
            print(f"note: DAGSTER_HOME={home} did not exist: created it, with a new Dagster instance; the UI and "
                  "dagster commands show this run only with this same DAGSTER_HOME", file=out)
        return instance
    home = storage.dagster_home
    home.mkdir(parents=True, exist_ok=True)
    # Two commands starting at once on a fresh root would both create the SQLite databases and their
    # migration stamps, leaving two alembic heads that break every later call: the first to take the
    # lock creates them, the other then opens what exists.
    with _exclusive(home / ".create.lock"):
        _drop_unfinished_index(home)
        instance = dg.DagsterInstance.local_temp(tempdir=str(home))
        from whileai_pipeline.defs.partitions import PARTITIONS_NAME

        instance.get_runs(limit=1)  # the run database
        instance.get_dynamic_partitions(PARTITIONS_NAME)  # the event log's index database
    return instance


def _instance_error(exc) -> str:
    """The part of an error opening an instance that says what is wrong, without Dagster's stack traces:
    each config error's own message (an unset variable names it), else the error with its root cause
    (e.g. psycopg2's "password authentication failed for user ...")."""
    errors = getattr(exc, "errors", None)  # DagsterInvalidConfigError
    if errors:
        messages = []
        for error in errors:
            message = error.message.split("\n\nStack Trace:", 1)[0]
            messages.append(message.rsplit("Error: ", 1)[-1] if "PostProcessingError" in message else message)
        return "; ".join(_one_line(m) for m in messages)
    reason = _one_line(str(exc)) or type(exc).__name__
    cause = exc
    while cause.__cause__ is not None or cause.__context__ is not None:
        cause = cause.__cause__ or cause.__context__
    root = _one_line(str(cause)) or type(cause).__name__
    if cause is not exc and root not in reason:
        reason = f"{reason} ({root})"
    return reason


def _one_line(text) -> str:
    """The first paragraph of an error message on one line, without a final period."""
    return " ".join(text.strip().split("\n\n", 1)[0].split()).rstrip(".")


def _drop_unfinished_index(home):
    """Remove the instance's event log index if the command that created it was killed before it was
    finished, so Dagster creates it again.

    Dagster creates ``history/runs/index.db`` only when the file does not exist; a command killed while
    it did (the first command on a fresh root, stopped by Ctrl-C or a CI timeout) left the file without
    its tables, and every later command on that root failed with "Using dynamic partitions definitions
    requires the dynamic partitions table ... run `dagster instance migrate`". An index whose creation
    finished has its alembic stamp (written last); one without it and without a registered run holds
    nothing to lose, and Dagster rebuilds the rest of it from the runs' own event files.
    """
    import sqlite3

    index = home / "history" / "runs" / "index.db"
    if not index.is_file():
        return
    try:
        with contextlib.closing(sqlite3.connect(f"file:{index}?mode=ro", uri=True)) as db:
            tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if "alembic_version" in tables or ("dynamic_partitions" in tables and
                                               db.execute("SELECT 1 FROM dynamic_partitions LIMIT 1").fetchone()):
                return
    except sqlite3.Error:  # not an unfinished index of ours: Dagster says what is wrong with it
        return
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{index}{suffix}")


@contextlib.contextmanager
def _exclusive(lock_path, on_wait=None):
    """Hold an exclusive lock on ``lock_path`` (a no-op where ``fcntl`` does not exist); ``on_wait()``
    is called first when another process holds it."""
    try:
        import fcntl
    except ImportError:  # not Linux or macOS
        yield
        return
    try:
        lock_path.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock_path, "a")
    except OSError as exc:  # a file where locks/ goes, another user's folder
        raise UsageError(f"cannot take the lock {lock_path} ({exc.strerror or exc}): move away what is in the way "
                         "there, or pass --home DIR naming a folder you can write") from None
    with fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _quiet_dagster():
    warnings.filterwarnings("ignore", module=r"dagster(\..*)?")
    for name in ("dagster", "alembic"):
        logging.getLogger(name).setLevel(logging.WARNING)


def _register(storage, instance, path, name=None) -> str:
    from whileai_pipeline.defs.partitions import PARTITIONS_NAME

    key = storage.register(path, name=name)
    if not instance.has_dynamic_partition(PARTITIONS_NAME, key):
        instance.add_dynamic_partitions(PARTITIONS_NAME, [key])
    return key


def _export_lines(result, storage, key):
    """One line per export format: where it went (after a line on quarantined input, if any); for an export a
    failed step left unmade, the files of an earlier export of the run that stay published."""
    lines = []
    for event in result.get_asset_materialization_events():
        md = event.materialization.metadata
        quarantined = md.get("quarantined_lines")  # a MetadataValue: true even when it holds 0
        if event.asset_key.to_user_string() == "raw_simulation_data" and quarantined is not None and quarantined.value:
            lines.append(f"  raw_simulation_data: WARNING {md['quarantined_lines'].value} unreadable line(s) left out, "
                         f"recorded in {md['quarantine_path'].value}")
        if event.asset_key.to_user_string() in ("raw_simulation_data", "scored_simulation_data", "preference_pairs") \
                and "warning" in md:
            lines.append(f"  {event.asset_key.to_user_string()}: WARNING {md['warning'].value}")
    for asset in ("sft_export", "dpo_export"):
        mats = [e for e in result.get_asset_materialization_events()
                if e.asset_key.to_user_string() == asset]
        if not mats:
            live = _still_published(storage, key, asset)
            lines.append(f"  {asset}: not materialized" + (
                f"; the earlier export is still published: {', '.join(map(str, live))}" if live else ""))
            continue
        md = mats[-1].materialization.metadata
        status = md["status"].value if "status" in md else "?"
        formats = md["formats"].value if "formats" in md else []
        for fmt in formats:
            rows = md.get(f"{fmt}/rows_written") or md.get(f"{fmt}/pairs")
            count = rows.value if rows is not None else "?"
            unit = ("row" if asset == "sft_export" else "pair") + ("" if count == 1 else "s")
            for label in ("published_path", "rejected_path"):
                if f"{fmt}/{label}" in md:
                    where = md[f"{fmt}/{label}"].value
                    verb = "published" if label == "published_path" else "REJECTED"
                    if status == "unchanged":
                        verb = "unchanged"
                    lines.append(f"  {asset} [{fmt}]: {verb} {count} {unit} -> {where}")
                    break
            else:
                why = _why_nothing(result, asset, md, fmt) if count == 0 else None
                lines.append(f"  {asset} [{fmt}]: nothing written ({count} {unit}; {status})"
                             + (f": {why}" if why else ""))
        if "rejected_path" in md:
            lines.append(f"  {asset}: candidate and reports kept under {md['rejected_path'].value}")
        if "kept_earlier" in md:
            lines.append(f"  {asset}: WARNING nothing new to publish; the files there are from an earlier "
                         f"materialization: {', '.join(md['kept_earlier'].value)}")
        if "removed" in md:
            lines.append(f"  {asset}: removed the files of formats not published this time: "
                         f"{', '.join(md['removed'].value)}")
        if "warnings" in md and "rejected_path" not in md:  # a refused candidate's: the gate lines say enough
            lines += _warning_lines(asset, md["warnings"].value, formats)
    from whileai_pipeline.defs.publishing import GATES

    for ev in result.get_asset_check_evaluations():
        # a gate that passed with a warning (nothing to read, validate: false) says so as well
        gate_warned = ev.passed and ev.check_name in GATES and ev.severity.value == "WARN"
        if (not ev.passed and ev.severity.value != "ERROR") or gate_warned:
            lines.append(f"  check {ev.asset_key.to_user_string()}.{ev.check_name} WARNING: {ev.description}")
    return lines


def _why_nothing(result, asset, md, fmt):
    """Why an export wrote nothing, from the counts of this run's steps; None when they do not say."""
    def upstream(name):
        events = [e for e in result.get_asset_materialization_events() if e.asset_key.to_user_string() == name]
        return {k: v.value for k, v in events[-1].materialization.metadata.items()} if events else {}

    if asset == "dpo_export":
        ties = md.get(f"{fmt}/ties_dropped")
        if ties is not None and ties.value:
            return f"the judge called all {ties.value} pairs ties, which the export drops (drop_ties)"
        built = upstream("preference_pairs")
        if built.get("pairs") == 0 and "prompts_seen" in built:
            scored = upstream("scored_simulation_data")
            ungraded = scored.get("ungraded", 0)
            # pairing reads rewards alone: "0 of 0 prompts" would hide that there were rows, none graded
            if not built["prompts_seen"] and ungraded and not scored.get("fails") and not scored.get("passes"):
                return (f"preference_pairs built no pairs: none of the {ungraded} rows has a reward to pair on "
                        f"({ungraded} ungraded)")
            return (f"preference_pairs built no pairs: {built.get('prompts_with_contrast', 0)} of "
                    f"{built['prompts_seen']} prompts have rollouts whose rewards differ by at least min_margin")
        return None
    scored = upstream("scored_simulation_data")
    fails, ungraded = scored.get("fails", 0), scored.get("ungraded", 0)
    if scored.get("passes") == 0 and (fails or ungraded):
        counts = ", ".join(f"{n} {what}" for n, what in ((fails, "failed"), (ungraded, "ungraded")) if n)
        rows = scored.get("dagster/row_count", fails + ungraded)
        return f"none of the {rows} rows passed ({counts}), and sft_rows: pass exports passing rows only"
    return None


def _warning_lines(asset, warnings_by_format, formats):
    """One line per distinct warning of an export's reports ({format: [text]}), the formats named when
    not every format has it: the training files were written, but a trainer may not see what it needs."""
    where = {}
    for fmt, texts in (warnings_by_format or {}).items():
        for text in texts or ():
            where.setdefault(text, []).append(fmt)
    return [f"  {asset}: WARNING {'' if len(fmts) == len(formats) else '(' + ', '.join(fmts) + ') '}{text}"
            for text, fmts in where.items()]


def _named_as_given(line, storage, key, path):
    """``line`` with the inbox copy of the run (and of its sidecar), and the raw stage's snapshot of it,
    named as the file the user gave: each is byte for byte that file, so a line number holds, and fixing
    a copy would not help (the next ``run FILE`` copies the original over it). Not the raw stage when
    ``on_bad_line: quarantine`` left lines out of it (it is then smaller): its line numbers are its own."""
    from whileai_pipeline.defs.resources import meta_path_for

    def size(p):
        try:
            return p.stat().st_size
        except OSError:
            return None

    raw, run = storage.stage_path(key, "raw"), storage.run_path(key)
    renamed = [(run, path), (storage.run_meta_path(key), meta_path_for(path))]
    if size(raw) == size(run):  # the raw stage keeps a subset of the run's lines verbatim: same size, same file
        renamed.append((raw, path))
    for copy, given in renamed:
        if copy.resolve() != Path(given).resolve():
            line = line.replace(str(copy), str(given))
    return line


def _failure_lines(result):
    """(the assets a blocking gate stopped, one line per failed gate or step)."""
    lines, blocked = [], set()
    for ev in result.get_asset_check_evaluations():
        if not ev.passed and ev.severity.value == "ERROR":
            blocked.add(ev.asset_key.to_user_string())
            lines.append(f"  gate {ev.asset_key.to_user_string()}.{ev.check_name} FAILED: {ev.description}")
    for event in result.all_events:
        if event.event_type_value == "STEP_FAILURE" and "DagsterAssetCheckFailedError" not in str(event.event_specific_data):
            err = getattr(event.event_specific_data, "error", None)
            while err is not None and err.cause is not None and "StepExecutionError" in (err.cls_name or ""):
                err = err.cause  # Dagster's wrapper only says which op: show what went wrong in it
            message = err.message.strip().splitlines()[0] if err and err.message else "failed"
            message = message.removeprefix("dagster._core.definitions.events.Failure: ")
            # our own errors open with their token (write_failed:, ...): the class path before it says nothing more
            message = re.sub(r"^whileai_pipeline\.core\.errors\.\w+: ", "", message)
            lines.append(f"  step {event.step_key} failed: {message}")
    return blocked, lines


def run_chain(path, *, config_file=None, name=None, home=None, verbose=False, out=None) -> int:
    """Register ``path`` and materialize the whole chain for it; returns the exit code.

    Raises ``UsageError`` for bad usage (missing file, bad config) before anything runs."""
    out = out or sys.stdout
    from whileai_pipeline.defs.config import ConfigFileError, flat_to_run_config

    path = _run_file(path)
    _not_being_simulated(path)
    key = _run_key(path, name)
    options = _load_config_file(config_file) if config_file else {}
    # Where a bad option came from: the file the user passed (the messages name only the option).
    in_file = f" (in config file {config_file})" if config_file else ""
    try:
        run_config = flat_to_run_config(options)
        _import_callables(run_config)
    except (ConfigFileError, ValueError) as exc:
        raise UsageError(f"{exc}{in_file}") from None
    given, home = home, _root_of(run_config, home)
    root_fix = _root_fix(run_config, config_file) if home is not None and given is None else None  # its own root

    if not verbose:
        _quiet_dagster()
    import dagster as dg

    try:
        from whileai_pipeline.core.parallel import env_workers
        from whileai_pipeline.core.progress import env_interval
        from whileai_pipeline.defs.resources import lock_timeout
        from whileai_pipeline.definitions import defs

        for setting in (env_workers, env_interval, lock_timeout):  # read by the steps: a bad value would
            setting()  # fail the run after it was registered
    except ValueError as exc:  # a bad setting the definitions or the steps read, e.g. $WHILEAI_PIPELINE_CRON
        raise UsageError(str(exc)) from None

    if not verbose:
        run_config = {**run_config, "loggers": {"console": {"config": {"log_level": "ERROR"}}}}
    job = defs.resolve_job_def("simulation_chain")
    try:  # an unknown key in an ``ops:`` file, before the run is registered (or its root made): nothing runs
        # execute_in_process runs on its own executor and takes any ``execution:`` block: check the rest
        dg.validate_run_config(job, {k: v for k, v in run_config.items() if k != "execution"})
    except dg.DagsterInvalidConfigError as exc:
        raise UsageError(f"invalid config: {_config_error(exc)}{in_file}") from None
    storage = _storage(home, root_fix)
    if not verbose and out.isatty():
        _attach_progress_bars(out)
    capture = contextlib.nullcontext([]) if verbose else _stderr_held_back()
    # One command at a time per run name, from registering to the last step: another command's register
    # would replace the inbox file while this run's steps read it.
    with _one_command(storage, key, out), _instance(storage, out) as instance:
        earlier = storage.registered_from(key)
        key = _register_run(storage, instance, path, name)
        if key is None:
            return EXIT_FAILED
        print(f"run {key!r}: {path} -> {storage.run_path(key)}", file=out)
        if note := _replaced_line(earlier, path, key, storage):
            print(note, file=out)
        try:
            with capture as held:
                result = job.execute_in_process(
                    run_config=run_config,
                    instance=instance,
                    partition_key=key,
                    resources={"storage": storage},
                    raise_on_error=False,
                )
        except dg.DagsterInvalidConfigError as exc:
            raise UsageError(f"invalid config: {_config_error(exc)}{in_file}") from None
        except Exception as exc:
            full = _disk_full(exc)
            if full is None:
                raise
            print(f"whileai-pipeline: error: the disk holding {storage.base} is full ({full}); the run stopped. "
                  "Published files are only ever replaced whole: each is the previous one or a complete new "
                  "one. Free space, or pass --home on a disk with room, and run again.", file=sys.stderr)
            return EXIT_FAILED
    if _interrupted(result):  # what other processes wrote is the watchers' tracebacks: left unsaid
        print(f"dagster run {result.run_id} (INTERRUPTED)", file=out)
        return _said_interrupted()
    if any(held):
        sys.stderr.write(b"".join(held).decode("utf-8", "replace"))
    print(f"dagster run {result.run_id} ({'success' if result.success else 'FAILED'})", file=out)
    for line in _export_lines(result, storage, key):
        print(line, file=out)
    if result.success:
        return EXIT_OK
    blocked, lines = _failure_lines(result)
    for line in lines:
        print(_named_as_given(line, storage, key, path), file=out)
    if blocked:
        print(_blocked_line(blocked, storage, key), file=out)
    return EXIT_FAILED


def _config_error(exc) -> str:
    """Dagster's config error without the stack traces it appends to a failed post-processing (an unset
    ``{env: NAME}``): its code's frames say nothing the user can act on; the sentence before them does."""
    lines, skipping = [], False
    for line in str(exc).splitlines():
        if line.strip() == "Stack Trace:":
            skipping = True
        elif skipping and (not line.strip() or line.startswith("  ")):
            continue
        else:
            skipping = False
            lines.append(line.removeprefix("dagster._config.errors.PostProcessingError: "))
    return "\n".join(lines).rstrip()


def _still_published(storage, key, asset) -> list:
    """The files ``published/`` holds for an export of the run, in format order."""
    from whileai_pipeline.core.gates import FORMATS

    paths = (storage.published_path(key, asset.removesuffix("_export"), fmt) for fmt in FORMATS)
    return [path for path in paths if path.is_file()]


def _blocked_line(blocked, storage, key):
    """What a refusal did to ``published/``: the earlier files stay, or (a run's first export) there are none."""
    blocked = sorted(blocked, key=lambda a: (a != "sft_export", a))
    kept = [a for a in blocked if _still_published(storage, key, a)]
    fresh = [a for a in blocked if a not in kept]
    parts = []
    if kept:
        parts.append(f"{' and '.join(kept)}: {'its' if len(kept) == 1 else 'their'} published files were left "
                     "untouched")
    if fresh:
        parts.append(f"{' and '.join(fresh)}: nothing was published (no earlier export of this run to keep)")
    return "a gate blocked " + "; ".join(parts)


@contextlib.contextmanager
def _stderr_held_back():
    """Dagster's own output to ``sys.stderr`` (its logs, warnings) dropped, and what the processes it
    starts write to stderr (fd 2) held back in the list it yields, for the caller to show afterwards.

    A terminal's Ctrl-C goes to the whole process group: with the CLI, to the ``watch_orphans.py``
    processes Dagster starts beside each step to mirror its output, each of which then dies with a
    KeyboardInterrupt traceback on stderr; the caller shows what was held back only when the run was
    not interrupted."""
    held = []
    sys.stderr.flush()
    try:
        saved = os.dup(2)
    except OSError:  # no stderr to keep clean
        with contextlib.redirect_stderr(io.StringIO()):
            yield held
        return
    try:
        with tempfile.TemporaryFile() as spool:
            os.dup2(spool.fileno(), 2)
            try:
                with contextlib.redirect_stderr(io.StringIO()):
                    yield held
            finally:
                os.dup2(saved, 2)
                spool.seek(0)
                held.append(spool.read())
    finally:
        os.close(saved)


def _said_interrupted() -> int:
    print("whileai-pipeline: interrupted (Ctrl-C): the run stopped where it was. Published files are only ever "
          "replaced whole (each is the previous one or a complete new one); run the same command again to "
          "finish.", file=sys.stderr)
    return EXIT_INTERRUPTED


def _register_run(storage, instance, path, name):
    """``_register``, its failures said for this command: a run still being written is bad usage (a
    UsageError); a copy into the inbox that fails on a full disk is a failed run (exit 1, as a full
    disk in a step is): it is said here, and None returned."""
    from whileai_pipeline.core.errors import WriteFailedError

    try:
        key = _register(storage, instance, path, name)
    except WriteFailedError as exc:
        reason = getattr(exc.reason, "strerror", None) or exc.reason
        print(f"whileai-pipeline: error: cannot copy the run into {exc.dest} ({reason}); nothing ran and the "
              f"published files are unchanged. Free space under {storage.base}, or pass --home on a disk with "
              "room, and run again.", file=sys.stderr)
        return None
    except ValueError as exc:  # e.g. source_changed: the file is still being written
        raise UsageError(str(exc)) from None
    return key


def _replaced_line(earlier, path, key, storage):
    """A note when run ``key`` came from another file before (``exp1/run.jsonl``, now ``exp2/run.jsonl``):
    runs are named by their file, so this one replaces that one's stages and published exports. Not when
    ``path`` is the inbox copy itself: that is the earlier run again."""
    path = str(Path(path).resolve())
    if earlier is None or path in (earlier, str(storage.run_path(key).resolve())):
        return None
    return (f"  note: run {key!r} was registered from {earlier} before; this file replaces it, and this run's "
            "exports replace that one's. Pass --name to keep both.")


INTERRUPTIONS = ("DagsterExecutionInterruptedError", "KeyboardInterrupt")


def _interrupted(result) -> bool:
    """Whether the run stopped because of Ctrl-C (SIGINT): Dagster fails the running step with
    DagsterExecutionInterruptedError and returns, where a bare exception name would be all we said;
    before the first step started (its resources starting up), it fails the run itself with it."""
    for event in result.all_events:
        if event.event_type_value in ("STEP_FAILURE", "PIPELINE_FAILURE"):
            err = getattr(event.event_specific_data, "error", None)
            while err is not None:
                if any(name in (err.cls_name or "") for name in INTERRUPTIONS):
                    return True
                err = err.cause
    return False


def _root_of(run_config, home):
    """The storage root of the run: ``--home``, else the run config's ``resources.storage.config.root``.
    The steps read and write under the latter when it is set, so the run file is registered (and the run
    locked) there too; a root given both ways that differs is bad usage."""
    from whileai_pipeline.defs.config import env_text

    root = env_text(_root_setting(run_config))  # {env: NAME}: Dagster reads it
    if not root or not isinstance(root, str):  # a wrong type is Dagster's to report (exit 2)
        return home
    if home and Path(home).expanduser().resolve() != Path(root).expanduser().resolve():
        raise UsageError(f"the config file sets resources.storage.config.root to {root} but --home is {home}: "
                         "give the storage root one way")
    return root


def _root_setting(run_config):
    """The run config's ``resources.storage.config.root`` as written (a path, or ``{env: NAME}``), or None."""
    resources = run_config.get("resources")
    storage = resources.get("storage") if isinstance(resources, dict) else None
    config = storage.get("config") if isinstance(storage, dict) else None
    return config.get("root") if isinstance(config, dict) else None


def _root_fix(run_config, config_file) -> str:
    """What to change when the storage root the config file names cannot be used: the file, or the variable
    it reads the root from."""
    setting = _root_setting(run_config)
    if isinstance(setting, dict) and isinstance(setting.get("env"), str):
        return f"set ${setting['env']}, which resources.storage.config.root in the config file {config_file} reads"
    return (f"change resources.storage.config.root in the config file {config_file} (or take it out and pass "
            "--home DIR)")


def _disk_full(exc):
    """The reason, if ``exc`` (or what caused it) is a full disk or quota: from our writes, or from
    Dagster's SQLite storage under the same root ("database or disk is full"); else None."""
    import errno

    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            return exc.strerror or str(exc)
        if "database or disk is full" in str(exc):
            return "database or disk is full"
        exc = exc.__cause__ or exc.__context__
    return None


def _attach_progress_bars(out):
    """A tqdm bar per stage on the terminal (the stages report rows done through core.progress)."""
    from tqdm import tqdm

    from whileai_pipeline.core.progress import attach_terminal_bars

    attach_terminal_bars(lambda what: tqdm(desc=what, unit=" rows", file=out, leave=False, dynamic_ncols=True))


def _import_callables(run_config):
    """Import the configured scorer and judge now: one that cannot be imported is bad usage, found
    before the run starts rather than two steps into it (ScorerError is a ValueError)."""
    from whileai_pipeline.core.scoring import load_callable, resolve_scorer
    from whileai_pipeline.defs.config import env_text

    ops = run_config.get("ops") or {}

    def option(op, name):  # any shape: Dagster's own check reports a wrong one (exit 2)
        block = ops.get(op) if isinstance(ops, dict) else None
        config = block.get("config") if isinstance(block, dict) else None
        return env_text(config.get(name)) if isinstance(config, dict) else None  # {env: NAME}: its value

    if option("scored_simulation_data", "scorer"):
        resolve_scorer(option("scored_simulation_data", "scorer"))
    if option("preference_pairs", "judge"):
        load_callable(option("preference_pairs", "judge"), "judge")


def _one_command(storage, key, out):
    return _exclusive(storage.base / "locks" / f"{key}.command.lock",
                      lambda: print(f"waiting for another whileai-pipeline command on run {key!r} to finish",
                                    file=out, flush=True))


def register_only(path, *, name=None, home=None, out=None) -> int:
    out = out or sys.stdout
    path = _run_file(path)
    _not_being_simulated(path)
    key = _run_key(path, name)
    _quiet_dagster()
    storage = _storage(home)
    with _one_command(storage, key, out), _instance(storage, out) as instance:
        earlier = storage.registered_from(key)
        key = _register_run(storage, instance, path, name)
    if key is None:
        return EXIT_FAILED
    print(f"registered {key!r}: {storage.run_path(key)}", file=out)
    if note := _replaced_line(earlier, path, key, storage):
        print(note, file=out)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="whileai-pipeline",
        description="Turn simulated agent runs into gated SFT and DPO training files (Dagster, in process).",
    )
    from whileai_pipeline import __version__

    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p, *, runs=True):
        p.add_argument("--home", help="storage root (default: $WHILEAI_PIPELINE_HOME or ./whileai_data)")
        if runs:  # register runs no Dagster job: it has no Dagster logs to show
            p.add_argument("-v", "--verbose", action="store_true",
                           help="show Dagster's own logs (the run's events, as `dagster dev` shows them)")

    p_run = sub.add_parser("run", help="register a run file and materialize the whole chain for it")
    p_run.add_argument("path", help="a JSONL run (a <name>.meta.json sidecar beside it is taken along)")
    p_run.add_argument("--config", help="YAML or JSON file of options (flat names, or a Dagster run config)")
    p_run.add_argument("--name", help="partition name (default: the file name without .jsonl)")
    common(p_run)

    p_demo = sub.add_parser("demo", help="run the chain on the sample run bundled with the package")
    p_demo.add_argument("--config", help="YAML or JSON file of options")
    common(p_demo)

    p_reg = sub.add_parser("register", help="copy a run into the inbox and add its partition, without running")
    p_reg.add_argument("path", help="a JSONL run (a <name>.meta.json sidecar beside it is taken along)")
    p_reg.add_argument("--name", help="partition name (default: the file name without .jsonl)")
    common(p_reg, runs=False)

    p_val = sub.add_parser("validate", help="check a training file against its consumer's rules "
                           "(openai: OpenAI fine-tuning files; trl: TRL's conversational shapes)")
    p_val.add_argument("path", help="an exported JSONL file")
    p_val.add_argument("--format", required=True, help="openai or trl")
    p_val.add_argument("--json", action="store_true", help="print the whole report as JSON")
    p_val.add_argument("--strict-keys", action="store_true",
                       help="treat keys the consumer does not read as errors (OpenAI uploads refuse them)")
    return parser


def _unknown_hint(command, unknown) -> str:
    """Why arguments a command does not take were given, as far as can be told: an export option given as a
    flag (they live in the --config file), or a second run file (a shell glob that matched two)."""
    from whileai_pipeline.defs.config import FLAT_OPTIONS

    options = [a.split("=", 1)[0].lstrip("-").replace("-", "_") for a in unknown if a.startswith("--")]
    known = [name for name in options if name in FLAT_OPTIONS]
    # the words that are no option and no option's value (``--workers 2``): run files given beside the first
    files = [a for i, a in enumerate(unknown)
             if not a.startswith("-") and not (i and unknown[i - 1].startswith("-") and "=" not in unknown[i - 1])]
    if known and command in ("run", "demo"):
        return (f" ({known[0]} is an option of the exports: put '{known[0]}: ...' in a YAML file and pass it as "
                "--config FILE; docs/pipeline.md, Options, lists them)")
    if known and command == "register":
        return f" (register runs nothing, so it takes no option of the exports: give {known[0]} to run's --config FILE)"
    if command == "register" and {"config", "verbose"} & set(options):
        return " (register runs nothing, so it takes neither --config nor --verbose: give them to run)"
    if command in ("run", "register") and files:
        return f" ({command} takes one run file: {command} each one on its own)"
    return ""


class _StdoutReaderMayLeave:
    """``sys.stdout`` for a command whose reader may leave early (``whileai-pipeline run x | head -1``): what
    is printed after that is dropped and the command goes on to its own exit code, so a refused export
    still exits 1 (under ``set -o pipefail`` a 0 would pass a CI step whose gate blocked)."""

    def __init__(self, stream):
        self._stream = stream
        self._gone = False

    def write(self, text):
        if not self._gone:
            try:
                return self._stream.write(text)
            except BrokenPipeError:
                self._reader_left()
        return len(text)

    def flush(self):
        if not self._gone:
            try:
                self._stream.flush()
            except BrokenPipeError:
                self._reader_left()

    def _reader_left(self):
        self._gone = True
        try:  # what is still buffered, flushed at exit, goes nowhere rather than into a second EPIPE
            target = self._stream.fileno()
            null = os.open(os.devnull, os.O_WRONLY)
        except (OSError, ValueError, io.UnsupportedOperation):
            return
        try:
            os.dup2(null, target)
        except OSError:
            pass
        finally:
            os.close(null)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def main(argv=None) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # what argparse says (usage, exit 2), and what to do instead
        parser.error(f"unrecognized arguments: {' '.join(unknown)}{_unknown_hint(args.command, unknown)}")
    stdout = sys.stdout
    sys.stdout = _StdoutReaderMayLeave(stdout)
    try:
        return _main(args)
    finally:
        sys.stdout = stdout


def _main(args) -> int:
    try:
        if args.command == "run":
            return run_chain(args.path, config_file=args.config, name=args.name, home=args.home,
                             verbose=args.verbose)
        if args.command == "validate":
            from whileai_pipeline.core.openai_format import run_validate

            return run_validate(args.path, args.format, json_output=args.json, strict_keys=args.strict_keys)
        if args.command == "demo":
            return run_chain(SAMPLE_RUN, config_file=args.config, home=args.home, verbose=args.verbose)
        return register_only(args.path, name=args.name, home=args.home)
    except UsageError as exc:
        print(f"whileai-pipeline: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C outside the run (importing Dagster, waiting for another command)
        return _said_interrupted()
    except BrokenPipeError:  # `whileai-pipeline demo | head`: the reader left, which is not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
