"""``podium bench --overhead``: the issue #10 figures, from the installed package."""

from __future__ import annotations

import json

import pytest

from podium.cli.main import main


def test_overhead_reports_each_level_as_json(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["bench", "--overhead", "--sessions", "3,20", "--rounds", "2", "--loop",
                 "asyncio", "--json"])
    assert code == 0
    result = json.loads(capsys.readouterr().out)
    assert [level["sessions"] for level in result["levels"]] == [3, 20]
    for level in result["levels"]:
        assert level["hand_us"] > 0 and level["podium_us"] > 0
        assert level["ratio_min"] <= level["ratio"] <= level["ratio_max"]
        assert 0 < level["gc_objects_waiting"] < 40
        assert 0 < level["bytes_per_session"] < 64 * 1024
    assert result["profile"] is True and result["target_ratio"] == 3.0
    assert result["latency_podium_steps_s"] is None
    # The profile's own cost: on against off, a median within its spread.
    assert result["profile_us_min"] <= result["profile_us"] <= result["profile_us_max"]
    assert result["target_profile_us"] == 3.0


def test_overhead_prints_a_table_and_the_worst_ratio(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--overhead", "--sessions", "4", "--rounds", "1", "--no-profile",
                 "--loop", "asyncio"]) == 0
    out = capsys.readouterr().out
    assert "N=     4" in out and "worst ratio" in out and "profile off" in out
    assert "(goal ≤ 3 µs)" not in out  # nothing to compare with profile off


@pytest.mark.parametrize("sessions", ["x", "0", ",", "-5"])
def test_bad_sessions_is_a_one_line_error(
    sessions: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--overhead", "--sessions", sessions]) == 2
    # One line on stderr, named like every other bench error (it was stdout, unprefixed).
    err = capsys.readouterr().err
    assert err.startswith("podium bench: error: --sessions") and err.count("\n") == 1, err


def test_a_negative_latency_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as refused:  # by the option's type, as argparse refuses
        main(["bench", "--overhead", "--latency", "-1", "--sessions", "2"])
    assert refused.value.code == 2
    assert "argument --latency: must be a finite number" in capsys.readouterr().err


def test_overhead_prints_what_the_profile_costs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--overhead", "--sessions", "4", "--rounds", "1", "--loop",
                 "asyncio"]) == 0
    out = capsys.readouterr().out
    assert "profile " in out and "µs/step" in out and ", N=1000 (goal ≤ 3 µs)" in out
    assert "profile on" in out
