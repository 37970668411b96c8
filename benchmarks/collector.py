"""GC: which garbage collector a cold scheduled run's driver should use, by the run's size.

A local driver runs the tasks too, so its collector works as hard as the run is large. For each of
``--gc-sizes``, a topic of that many events is produced once (not measured); each repetition runs a
cold scheduled run of it into a new lake (a spark-submit, as a DAG's task submits it, for the records
it will read) with G1 and with the throughput collector (ParallelGC), in alternating order; all else
is as tidemark picks it for that size (the quick compiler up to ``QUICK_COMPILER_RECORDS``, the
default cap). The figure per size: Parallel's median time over G1's, and the same for CPU (the
bench's, services included). ``spark_jobs.spark`` picks Parallel above the size where it wins.
"""

from __future__ import annotations

import re
from functools import partial
from pathlib import Path

from benchmarks.context import BenchContext, ensure
from benchmarks.workloads import spark_submit

COLLECTORS = (("G1", "-XX:+UseG1GC"), ("PAR", "-XX:+UseParallelGC"))


def stage_collector(ctx: BenchContext) -> None:
    """GC: cold scheduled runs at each size, G1 and Parallel alternated repetition by repetition."""
    from spark_jobs import ingest

    o = ctx.options
    app = Path(ingest.__file__)
    for index, size in enumerate(o.gc_sizes):
        topic = f"bench-{ctx.run_id}-gc-{size}"
        ctx.record.progress(f"GC: producing {size:,} events (not measured)")
        report = ctx.produce(topic, size, o.entities, f"{ctx.run_id}-gc{size}-", o.seed + 5)
        ensure(report.committed == size, f"produced {report.committed} of {size} events")
        if index == 0 and o.warmup:  # the first spark-submit may write the class archive: not measured
            warmup = ctx.new_sink("gc_warmup", topic)
            spark_submit(warmup.settings, app, ["scheduled"], 1800, size)
            ctx.discard(warmup)
        for rep in range(o.repeat):
            order = COLLECTORS if rep % 2 == 0 else COLLECTORS[::-1]
            for name, option in order:
                m = ctx.record.measurement(
                    f"GC {name} {size:,}", f"cold scheduled run of {size:,} events, {name} collector", size
                )
                sink = ctx.new_sink(f"gc_{name.lower()}_{size}_{rep}", topic)
                submit = partial(spark_submit, sink.settings, app, ["scheduled"], 1800, size, option)
                out = ctx.record.measure(m, submit)
                read = sum(int(n.replace(",", "")) for n in re.findall(r" read ([\d,]+) = ", out))
                ensure(read == size, f"the cold run read {read:,} records, not {size:,}: {out!r}")
                ctx.discard(sink)
