"""Rows go to PostgreSQL's COPY encoded as it reads them (sinks.postgres), never held whole."""

from __future__ import annotations

import csv
import io
import itertools

from spark_jobs.sinks.postgres import _CsvStream


def test_the_copy_stream_encodes_only_as_much_as_each_read_asks_for() -> None:
    produced = itertools.count()
    rows = ((next(produced), "x" * 50) for _ in itertools.repeat(None))  # endless: must never be drained
    stream = _CsvStream(rows)
    chunk = stream.read(8192)
    assert 8192 <= len(chunk) < 8192 + 100 and stream.count < 200
    assert next(produced) == stream.count  # nothing was produced beyond what was encoded


def test_the_copy_stream_round_trips_any_text_and_null_and_ends_empty() -> None:
    rows = [("tab\there", 'quote " and \\N', None), ("new\nline", "", 7)]
    stream = _CsvStream(iter(rows))
    text = ""
    while chunk := stream.read(5):
        text += chunk
    assert stream.count == 2 and stream.read(5) == ""
    parsed = list(csv.reader(io.StringIO(text)))
    assert parsed == [["tab\there", 'quote " and \\N', ""], ["new\nline", "", "7"]]
