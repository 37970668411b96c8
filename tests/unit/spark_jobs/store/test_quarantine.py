"""A quarantine reason is selected by its code or by the start of its text, as an operator writes it."""

from __future__ import annotations

import pytest

from spark_jobs.store.quarantine import AVRO_REASON_CODES, REASON_CODES, reason_code, selects

ENUM = 'schema: enum at /status: does not have a value in the enumeration ["new", "paid"]'


@pytest.mark.parametrize(
    ("wanted", "selected"),
    [
        (ENUM, True),  # the whole text, as before
        ("schema", True),  # its code
        ("schema: enum at /status", True),  # the start of its text, past the code's ':'
        ("schema: enum at /status: does not", True),
        ("schema:", True),
        ("schem", False),  # neither a code nor past its ':'
        ("schema: enum at /stat", True),  # a start is a start
        ("schema: enum at /event", False),
        ("missing_field", False),
        ("", False),
    ],
)
def test_a_reason_is_selected_by_its_whole_text_its_code_or_its_start(wanted: str, selected: bool) -> None:
    assert selects(wanted, ENUM) is selected


def test_every_code_the_check_gives_is_the_text_before_the_first_colon() -> None:
    assert reason_code(ENUM) == "schema"
    assert reason_code("invalid_json") == "invalid_json"  # a reason that is its code alone
    assert reason_code("wrong_type: /amount does not fit the column amount (int)") == "wrong_type"
    assert len(set(REASON_CODES)) == len(REASON_CODES) and all(":" not in code for code in REASON_CODES)


def test_the_codes_are_every_code_the_contract_check_writes() -> None:
    """The readmit form offers REASON_CODES: a code the check writes and the list lacks could not be chosen."""
    import re

    from spark_jobs.settings import PROJECT_ROOT

    sources = sorted((PROJECT_ROOT / "jvm/contract/src/main/java/io/tidemark/contract").glob("*.java"))
    java = "\n".join(source.read_text() for source in sources)
    python = (PROJECT_ROOT / "spark_jobs/validation.py").read_text()
    code = r"([a-z0-9_]+)"
    written = set(re.findall(rf'reject\("{code}', java)) | set(re.findall(rf'Parsed\(null, null, "{code}', java))
    written |= set(re.findall(rf'(?:return|String \w+ =) "{code}: ', java))
    written |= set(re.findall(r"(?:THEN |f?\")'([a-z0-9_]+): ", python))
    assert {"null_key", "invalid_json", "schema", "bad_event_time", "wrong_type", "not_avro", "bad_avro"} <= written
    assert written <= {*REASON_CODES, *AVRO_REASON_CODES}, written - {*REASON_CODES, *AVRO_REASON_CODES}
