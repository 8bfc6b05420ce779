"""kafka-lag-exporter's time lag: the time the log end reached an offset, from sampled (offset, time) points."""

from __future__ import annotations

import pytest

from broker_core.groups.lag import OffsetTimeline, consumer_lag


def timeline(*points: tuple[int, float]) -> OffsetTimeline:
    line = OffsetTimeline()
    for offset, at in points:
        line.add(offset, at)
    return line


def test_the_time_of_an_offset_between_two_samples_is_interpolated() -> None:
    line = timeline((0, 100.0), (60, 106.0), (120, 108.0))
    assert line.time_of(30) == pytest.approx(103.0)
    assert line.time_of(90) == pytest.approx(107.0)
    assert line.time_of(60) == pytest.approx(106.0)


def test_an_offset_older_than_every_sample_is_extrapolated_from_the_average_rate() -> None:
    line = timeline((100, 10.0), (200, 20.0))
    assert line.time_of(50) == pytest.approx(5.0)


def test_a_flat_run_keeps_its_first_and_latest_sample_so_a_new_record_dates_from_the_run_end() -> None:
    line = timeline((10, 1.0), (10, 2.0), (10, 3.0), (10, 4.0), (20, 5.0))
    assert list(line.points) == [(10, 1.0), (10, 4.0), (20, 5.0)]
    assert line.time_of(15) == pytest.approx(4.5)


def test_a_smaller_offset_after_truncation_starts_the_timeline_again() -> None:
    line = timeline((50, 1.0), (60, 2.0), (40, 3.0))
    assert list(line.points) == [(40, 3.0)]


def test_the_timeline_keeps_a_bounded_number_of_points() -> None:
    line = OffsetTimeline(points=3)
    for i in range(10):
        line.add(i, float(i))
    assert list(line.points) == [(7, 7.0), (8, 8.0), (9, 9.0)]


def test_lag_is_zero_in_offsets_and_seconds_for_a_group_at_the_log_end() -> None:
    assert consumer_lag(120, 120, timeline((120, 1.0)), now_s=50.0) == (0, 0.0)
    assert consumer_lag(120, 130, timeline((120, 1.0)), now_s=50.0) == (0, 0.0)


def test_lag_in_seconds_is_now_minus_when_the_log_end_reached_the_committed_offset() -> None:
    lag, seconds = consumer_lag(120, 30, timeline((0, 100.0), (60, 106.0), (120, 108.0)), now_s=110.0)
    assert lag == 90
    assert seconds == pytest.approx(7.0)


def test_a_single_sample_gives_lag_in_offsets_but_no_time_lag() -> None:
    assert consumer_lag(120, 30, timeline((120, 1.0)), now_s=5.0) == (90, None)
