"""What `tidemark demo` prints about the sinks before and after its replay."""

from __future__ import annotations

from tidemark.demo import fingerprint_table


def test_the_demo_prints_each_sinks_rows_and_checksums_before_and_after_the_replay() -> None:
    before = {"delta events": (4_900, "123456789"), "postgres sessions": (50, 987)}
    same = fingerprint_table(before, dict(before))
    assert same[0].split() == ["sink", "rows", "checksum", "before", "the", "replay", "checksum", "after"]
    assert same[1].split() == ["delta", "events", "4,900", "123456789", "123456789", "same"]
    assert same[2].split() == ["postgres", "sessions", "50", "987", "987", "same"]
    changed = fingerprint_table(before, {**before, "postgres sessions": (50, 986)})
    assert changed[2].split() == ["postgres", "sessions", "50", "987", "986", "CHANGED"]
