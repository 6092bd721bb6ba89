"""How the drivers fill a RequestRecord (arrivals, ends, failures) and how tables print it."""

from __future__ import annotations

from llmd.bench.number_cell import number_cell
from llmd.bench.request_record import ABORTED, FAILED, OK, RequestRecord


def test_the_first_output_sets_ttft_and_every_output_is_an_arrival():
    record = RequestRecord(0, scheduled_s=0.0, sent_s=1.0)
    for arrived_s in (1.5, 1.75, 2.25):
        record.note_output(arrived_s)
    assert record.first_token_s == 1.5 and record.ttft == 0.5
    assert record.token_arrival_s == [1.5, 1.75, 2.25]
    assert record.itl == [0.25, 0.5]


def test_stop_and_length_complete_any_other_reason_aborts():
    for reason, status in (("stop", OK), ("length", OK), ("abort", ABORTED), ("error", ABORTED)):
        record = RequestRecord(0, scheduled_s=0.0, sent_s=1.0)
        record.end(3.0, reason)
        assert (record.status, record.finish_reason, record.e2e) == (status, reason, 2.0)


def test_a_failure_keeps_its_reason_and_sets_the_end_only_when_given():
    record = RequestRecord(0, scheduled_s=0.0, sent_s=1.0)
    record.fail("the stream ended without a finished message")
    assert (record.status, record.finished_s) == (FAILED, None)
    assert record.error == "the stream ended without a finished message"
    record.fail("ConnectionError: gone", 4.0)
    assert (record.error, record.finished_s, record.is_ok) == ("ConnectionError: gone", 4.0, False)


def test_a_table_cell_is_a_dash_when_missing_and_fixed_point_otherwise():
    assert number_cell(None) == "-" and number_cell(None, 2, scale=100) == "-"
    assert number_cell(12.345) == "12.3"
    assert number_cell(2.5, 2) == "2.50"
    assert number_cell(0.875, scale=100) == "87.5"
