"""One bench run from start to end: services and Spark up, the stages, the results, clean-up.

Whatever fails, the results measured so far are written (with the error) and printed, and what
the run started or made is stopped or removed.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from benchmarks.catchup import stage_batch_cost, stage_catchup
from benchmarks.checks import build_checks
from benchmarks.collector import stage_collector
from benchmarks.context import BenchContext, CpuMeter, Recorder
from benchmarks.edge_stages import stage_contract, stage_floor, stage_hotkey, stage_soak
from benchmarks.figures import machine_info, versions
from benchmarks.options import BenchOptions
from benchmarks.report import format_table, results_document
from benchmarks.services import BenchServices
from benchmarks.stages import NEEDS_MAIN_TOPIC, produce_main, stage_b1, stage_slope, stage_spark
from benchmarks.stored_stages import stage_empty, stage_growth, stage_pg, stage_replay
from spark_jobs.settings import Settings


def run_bench(settings: Settings, options: BenchOptions) -> dict[str, Any]:
    """Run the selected stages, print the table, write the JSON; returns the results document."""
    run_id = datetime.now(UTC).strftime("%Y%m%d%H%M%S") + uuid.uuid4().hex[:4]
    services = BenchServices(settings, run_id)
    record = Recorder(CpuMeter(services.pids))
    ctx = BenchContext(settings, options, services, record, work=settings.home / "runs" / run_id)
    record.progress(
        f"run {run_id}: {options.events:,} events, {options.repeat} repetition(s), stages "
        f"{','.join(options.stages)}; state in {settings.home}; {os.cpu_count()} CPUs"
    )
    error = None
    document: dict[str, Any] = {}
    try:
        start(ctx)
        run_stages(ctx)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"
        raise
    finally:
        try:
            document = results(ctx, error)  # versions need Spark and PostgreSQL: before clean-up
        finally:
            clean_up(ctx)
        output = options.output or settings.home / "results.json"
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(json.dumps(document, indent=2, default=str) + "\n")
        measurements = record.measurements
        if measurements:
            print(format_table(measurements.values(), build_checks(measurements)))
        summary = document.get("summary", {})
        print(
            f"\n{os.cpu_count()} CPUs; {summary.get('passed', 0)} target(s) met, {summary.get('failed', 0)} missed"
            f"{' (' + ', '.join(summary['failed_checks']) + ')' if summary.get('failed_checks') else ''}; "
            f"{document.get('total_seconds', 0):.0f} s in all. JSON: {output}"
        )
    return document


def start(ctx: BenchContext) -> None:
    """The services and the migrated template database, then the run's Spark session (timed)."""
    from spark_jobs.spark import build_session, spark_jars

    spark_jars(ctx.settings)  # fail early with "run make jars"
    ctx.services.start(ctx.record.progress)
    started = time.perf_counter()
    ctx.session = build_session(ctx.settings, "tidemark-bench")
    ctx.meta["spark_session_start_seconds"] = round(time.perf_counter() - started, 2)
    ctx.record.progress(f"Spark session started in {ctx.meta['spark_session_start_seconds']:.1f} s")


def results(ctx: BenchContext, error: str | None = None) -> dict[str, Any]:
    """The results document: run, options, machine and versions, the measurements and their checks."""
    measurements = ctx.record.measurements
    meta = {
        "tidemark_bench": 1,
        "run_id": ctx.run_id,
        "finished_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "total_seconds": round(ctx.record.elapsed, 1),
        "options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(ctx.options).items()},
        "machine": machine_info(),
        "versions": versions(ctx.settings, ctx.session, ctx.services.postgres_version()),
        **ctx.meta,
    }
    if error:
        meta["error"] = error
    return results_document(meta, measurements.values(), build_checks(measurements))


def clean_up(ctx: BenchContext) -> None:
    """Stop Spark; remove the run's topics, databases and files unless ``--keep``; stop what the run started."""
    if ctx.session is not None:
        try:
            ctx.session.stop()
        except Exception as exc:  # clean-up continues whatever failed
            ctx.record.progress(f"stopping Spark failed: {exc}")
    if not ctx.options.keep:
        ctx.services.remove_run_data(ctx.record.progress)
        shutil.rmtree(ctx.work, ignore_errors=True)
    ctx.services.stop_started(ctx.record.progress)


# Each step of a run, in :data:`~benchmarks.options.STAGES` order, and the stages whose selection runs it.
STEPS: tuple[tuple[frozenset[str], Callable[[BenchContext], None]], ...] = (
    (frozenset(NEEDS_MAIN_TOPIC), produce_main),
    (frozenset({"b1"}), stage_b1),
    (frozenset({"b2", "b2l", "peer", "p1"}), stage_spark),
    (frozenset({"slope"}), stage_slope),
    (frozenset({"batchcost"}), stage_batch_cost),
    (frozenset({"replay"}), stage_replay),
    (frozenset({"empty"}), stage_empty),
    (frozenset({"pg"}), stage_pg),
    (frozenset({"growth"}), stage_growth),
    (frozenset({"hotkey"}), stage_hotkey),
    (frozenset({"contract"}), stage_contract),
    (frozenset({"floor"}), stage_floor),
    (frozenset({"soak"}), stage_soak),
    (frozenset({"catchup"}), stage_catchup),
    (frozenset({"collector"}), stage_collector),
)


def run_stages(ctx: BenchContext) -> None:
    """Run the selected stages, in :data:`~benchmarks.options.STAGES` order."""
    selected = set(ctx.options.stages)
    for stages, step in STEPS:
        if selected & stages:
            step(ctx)
