import pytest

from tidemark.cli import build_parser, main


def test_produce_flags_parse_into_typed_values() -> None:
    args = build_parser().parse_args(
        [
            "produce",
            "--count",
            "100",
            "--duplicate-rate",
            "0.1",
            "--transaction-size",
            "10",
            "--abort-rate",
            "0.5",
        ]
    )
    assert (args.count, args.duplicate_rate, args.transaction_size, args.abort_rate) == (100, 0.1, 10, 0.5)


@pytest.mark.parametrize("argv", [["produce", "--late-rate", "2"], ["produce", "--entities", "0"]])
def test_bad_flags_exit_with_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        build_parser().parse_args(argv)
    assert exit_info.value.code == 2
    assert "tidemark produce: error" in capsys.readouterr().err


def test_bad_environment_is_reported_before_any_work(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    monkeypatch.setenv("TIDEMARK_KAFKA_PORT", "not-a-port")
    assert main(["status"]) == 2
    assert "TIDEMARK_KAFKA_PORT='not-a-port' is not a port number" in capsys.readouterr().err
