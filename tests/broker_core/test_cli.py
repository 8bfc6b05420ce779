"""The `floe` topic, produce and consume commands, end to end against a local stack."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from broker_core.cli import main
from broker_core.local_stack import LocalStack
from broker_core.partitioner import partition_for_key
from tests.support.stack import running_stack


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalStack]:
    with running_stack(tmp_path_factory.mktemp("cli-stack")) as running:
        yield running


def floe(stack: LocalStack, capsys: pytest.CaptureFixture[str], *args: str,
         stdin: bytes | None = None, monkeypatch: pytest.MonkeyPatch | None = None) -> tuple[int, str, str]:
    """Run `floe ARGS --stack <stack dir>` in this process; (exit code, stdout, stderr)."""
    if stdin is not None:
        assert monkeypatch is not None
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    capsys.readouterr()
    code = main([*args, "--stack", str(stack.directory)])
    out, err = capsys.readouterr()
    return code, out, err


def table_rows(out: str) -> list[list[str]]:
    """The cells of each row of the rich tables in ``out``."""
    rows = []
    for line in out.splitlines():
        cells = re.split("[│┃|]", line)
        if len(cells) > 2:
            rows.append([cell.strip() for cell in cells[1:-1]])
    return rows


def test_topics_create_list_describe_and_delete(stack: LocalStack, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = floe(stack, capsys, "topics", "create", "cli-admin", "--partitions", "4",
                        "--config", "retention.ms=7200000", "--config", "segment.bytes=1048576")
    assert code == 0
    assert "created topic cli-admin" in out and "4 partitions" in out

    code, out, _ = floe(stack, capsys, "topics", "list")
    assert code == 0
    listed = {row[0]: row for row in table_rows(out)}
    assert listed["cli-admin"][1:3] == ["4", "1"]

    code, out, _ = floe(stack, capsys, "topics", "describe", "cli-admin")
    assert code == 0
    assert "partitions 4" in out.splitlines()[0]
    rows = table_rows(out)
    partitions = [row for row in rows if len(row) == 6 and row[0].isdigit()]
    assert [row[0] for row in partitions] == ["0", "1", "2", "3"]
    assert all(row[1] == "1" and row[3] == "1" and row[4] == "1" and row[5] == "" for row in partitions)
    configs = {row[0]: row[1] for row in rows if len(row) == 2}
    assert configs["retention.ms"] == "7200000"
    assert configs["segment.bytes"] == "1048576"

    code, out, _ = floe(stack, capsys, "topics", "delete", "cli-admin")
    assert code == 0 and "deleted topic cli-admin" in out
    _, out, _ = floe(stack, capsys, "topics", "list")
    assert "cli-admin" not in out


def test_describing_an_unknown_topic_fails_with_the_kafka_error(stack: LocalStack,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = floe(stack, capsys, "topics", "describe", "cli-no-such-topic")
    assert code == 1
    assert out == ""
    assert "unknown_topic_or_partition" in err and "cli-no-such-topic" in err


def test_creating_a_topic_with_a_malformed_config_is_refused(stack: LocalStack,
                                                            capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = floe(stack, capsys, "topics", "create", "cli-bad-config", "--config", "retention.ms")
    assert code == 2
    assert "KEY=VALUE" in err
    _, out, _ = floe(stack, capsys, "topics", "list")
    assert "cli-bad-config" not in out


def test_produced_lines_are_consumed_back_with_keys_on_their_partitions(
        stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-records", "--partitions", "3")[0] == 0
    lines = [b"user-1:signed up", b"user-2:logged in", b"user-1:bought \xc3\xa9clairs", b"no key here",
             b"user-3:a:b:c"]
    code, _, err = floe(stack, capsys, "produce", "cli-records", "--key-separator", ":",
                        stdin=b"\n".join(lines) + b"\n", monkeypatch=monkeypatch)
    assert code == 0
    assert "produced 5 records" in err

    code, out, err = floe(stack, capsys, "consume", "cli-records", "--from-beginning", "--max-records", "5",
                          "--format", "json")
    assert code == 0
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == 5
    by_value = {r["value"]: r for r in records}
    assert set(by_value) == {"signed up", "logged in", "bought éclairs", "no key here", "a:b:c"}
    for record in records:
        if record["key"] is not None:
            assert record["partition"] == partition_for_key(record["key"].encode(), 3)
        assert record["timestamp"] > 0
        assert record["headers"] == []
    assert by_value["no key here"]["key"] is None
    assert by_value["a:b:c"]["key"] == "user-3"
    user_1 = [r for r in records if r["key"] == "user-1"]
    assert [r["value"] for r in sorted(user_1, key=lambda r: r["offset"])] == ["signed up", "bought éclairs"]
    assert "consumed 5 records" in err

    code, out, _ = floe(stack, capsys, "consume", "cli-records", "--partition",
                        str(partition_for_key(b"user-1", 3)), "--offset", "0", "--timeout", "1")
    assert code == 0
    assert "user-1\tsigned up" in out.splitlines()
    assert "user-1\tbought éclairs" in out.splitlines()


def test_unkeyed_lines_go_round_robin_to_every_partition(
        stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-round-robin", "--partitions", "3")[0] == 0
    code, _, _ = floe(stack, capsys, "produce", "cli-round-robin", "--compression", "zstd",
                      stdin=b"".join(b"line %d\n" % i for i in range(9)), monkeypatch=monkeypatch)
    assert code == 0
    _, out, _ = floe(stack, capsys, "consume", "cli-round-robin", "--from-beginning", "--max-records", "9",
                     "--format", "json")
    records = [json.loads(line) for line in out.splitlines()]
    assert sorted(r["value"] for r in records) == sorted(f"line {i}" for i in range(9))
    assert sorted(r["partition"] for r in records) == [0, 0, 0, 1, 1, 1, 2, 2, 2]


def test_produce_to_one_partition_and_consume_it_as_text(
        stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-one-partition", "--partitions", "2")[0] == 0
    code, _, _ = floe(stack, capsys, "produce", "cli-one-partition", "--partition", "1",
                      stdin=b"first\nsecond\n", monkeypatch=monkeypatch)
    assert code == 0
    _, out, _ = floe(stack, capsys, "consume", "cli-one-partition", "--partition", "1", "--from-beginning",
                     "--timeout", "1")
    assert out.splitlines() == ["null\tfirst", "null\tsecond"]
    _, out, _ = floe(stack, capsys, "consume", "cli-one-partition", "--partition", "0", "--from-beginning",
                     "--timeout", "0.5")
    assert out == ""


def test_consume_without_a_start_option_only_sees_new_records(
        stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-latest")[0] == 0
    floe(stack, capsys, "produce", "cli-latest", stdin=b"old\n", monkeypatch=monkeypatch)
    code, out, err = floe(stack, capsys, "consume", "cli-latest", "--timeout", "0.5")
    assert code == 0 and out == "" and "consumed 0 records" in err


def test_producing_to_a_partition_the_topic_lacks_is_refused(
        stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-narrow")[0] == 0
    code, _, err = floe(stack, capsys, "produce", "cli-narrow", "--partition", "5", stdin=b"x\n",
                        monkeypatch=monkeypatch)
    assert code == 2 and "1 partitions" in err


def test_the_installed_entry_point_reaches_the_brokers_named_on_the_command_line(stack: LocalStack) -> None:
    create = subprocess.run(
        [sys.executable, "-m", "broker_core.cli", "topics", "create", "cli-subprocess",
         "--bootstrap-servers", stack.bootstrap_servers],
        capture_output=True, text=True, timeout=120, check=False)
    assert create.returncode == 0, create.stderr
    produce = subprocess.run(
        [sys.executable, "-m", "broker_core.cli", "produce", "cli-subprocess", "--key-separator", "=",
         "--bootstrap-servers", stack.bootstrap_servers],
        input="colour=blue\n", capture_output=True, text=True, timeout=120, check=False)
    assert produce.returncode == 0, produce.stderr
    consume = subprocess.run(
        [sys.executable, "-m", "broker_core.cli", "consume", "cli-subprocess", "--from-beginning",
         "--max-records", "1", "--bootstrap-servers", stack.bootstrap_servers],
        capture_output=True, text=True, timeout=120, check=False)
    assert consume.returncode == 0, consume.stderr
    assert consume.stdout == "colour\tblue\n"


def test_a_missing_stack_directory_is_reported_without_a_traceback(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["topics", "list", "--stack", str(tmp_path / "nowhere")])
    _, err = capsys.readouterr()
    assert code == 2
    assert "floe local up" in err and "Traceback" not in err


def test_configs_alter_and_describe_a_topic_as_kafka_configs_does(stack: LocalStack,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-configs")[0] == 0
    code, out, _ = floe(stack, capsys, "configs", "alter", "--entity-type", "topics", "--entity-name", "cli-configs",
                        "--add-config", "retention.ms=3600000,retention.bytes=2048")
    assert code == 0 and "Completed updating config for topic cli-configs" in out
    code, out, _ = floe(stack, capsys, "configs", "describe", "--topic", "cli-configs")
    assert code == 0
    assert "  retention.ms=3600000" in out.splitlines() and "  retention.bytes=2048" in out.splitlines()

    code, out, err = floe(stack, capsys, "configs", "alter", "--topic", "cli-configs",
                          "--add-config", "retention.bytes=4096,segment.ms=soon")
    assert code == 1
    assert "invalid_config" in err and "segment.ms" in err
    code, out, _ = floe(stack, capsys, "configs", "alter", "--topic", "cli-configs", "--delete-config", "retention.ms")
    assert code == 0
    _, out, _ = floe(stack, capsys, "configs", "describe", "--topic", "cli-configs")
    assert "  retention.bytes=2048" in out.splitlines() and "  retention.ms=604800000" in out.splitlines()


def test_records_delete_moves_the_log_start_and_leaders_elect_reports_no_election_needed(
        stack: LocalStack, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    assert floe(stack, capsys, "topics", "create", "cli-trimmed")[0] == 0
    assert floe(stack, capsys, "produce", "cli-trimmed", stdin=b"a\nb\nc\nd\n", monkeypatch=monkeypatch)[0] == 0
    code, out, _ = floe(stack, capsys, "records", "delete", "--topic", "cli-trimmed", "--partition", "0",
                        "--offset", "2")
    assert code == 0 and "log start offset is now 2" in out
    code, out, _ = floe(stack, capsys, "consume", "cli-trimmed", "--from-beginning", "--max-records", "2")
    assert code == 0 and out.split() == ["null", "c", "null", "d"]  # unkeyed records: key, value
    code, _, err = floe(stack, capsys, "records", "delete", "--topic", "cli-trimmed", "--partition", "0",
                        "--offset", "9")
    assert code == 1 and "offset_out_of_range" in err

    code, out, _ = floe(stack, capsys, "leaders", "elect", "--election-type", "preferred", "--topic", "cli-trimmed")
    assert code == 0 and out.strip() == "cli-trimmed-0: election_not_needed"
