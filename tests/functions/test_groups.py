"""Consumer groups over HTTP: join, heartbeat and leave with server-side assignment; committed offsets."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from tests.functions.http_api import HttpApi


def partitions_of(answer: dict) -> set[tuple[str, int]]:
    return {(tp["topic"], p) for tp in answer["assignment"] for p in tp["partitions"]}


def fresh_group() -> str:
    return f"g-{uuid.uuid4().hex[:10]}"


def test_two_members_end_up_with_disjoint_halves_after_the_handover(
        api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=4)
    group = fresh_group()
    first = api.post(f"/v1/groups/{group}/members", {"topics": [topic], "session_timeout_ms": 30_000}).body
    assert partitions_of(first) == {(topic, p) for p in range(4)}
    second = api.post(f"/v1/groups/{group}/members", {"topics": [topic], "session_timeout_ms": 30_000}).body
    assert partitions_of(second) == set()

    def beat(member: dict) -> dict:
        answer = api.post(f"/v1/groups/{group}/members/{member['member_id']}/heartbeat",
                          {"member_epoch": member["member_epoch"]})
        assert answer.status == 200, answer.body
        return answer.body

    first = beat(first)  # told to give up two partitions
    first = beat(first)  # acknowledges; moves to the new epoch
    second = beat(second)
    assert len(partitions_of(first)) == len(partitions_of(second)) == 2
    assert partitions_of(first) | partitions_of(second) == {(topic, p) for p in range(4)}
    assert first["member_epoch"] == second["member_epoch"]

    described = api.get(f"/v1/groups/{group}").body
    assert described["assignment_epoch"] == first["member_epoch"]
    assert {m["member_id"] for m in described["members"]} == {first["member_id"], second["member_id"]}

    assert api.delete(f"/v1/groups/{group}/members/{first['member_id']}").status == 204
    second = beat(second)
    assert partitions_of(second) == {(topic, p) for p in range(4)}


def test_a_stale_epoch_is_fenced_and_an_unknown_member_gets_404(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    group = fresh_group()
    member = api.post(f"/v1/groups/{group}/members", {"topics": [topic]}).body
    api.post(f"/v1/groups/{group}/members", {"topics": [topic]})
    fenced = api.post(f"/v1/groups/{group}/members/{member['member_id']}/heartbeat",
                      {"member_epoch": member["member_epoch"] + 7})
    assert fenced.status == 409
    assert fenced.body["member_epoch"] == member["member_epoch"]
    unknown = api.post(f"/v1/groups/{group}/members/{uuid.uuid4().hex}/heartbeat", {"member_epoch": 1})
    assert unknown.status == 404


def test_offsets_commit_with_the_current_epoch_and_read_back(api: HttpApi, make_topic: Callable[..., str]) -> None:
    topic = make_topic(partitions=2)
    group = fresh_group()
    member = api.post(f"/v1/groups/{group}/members", {"topics": [topic]}).body
    commit = {"member_id": member["member_id"], "member_epoch": member["member_epoch"],
              "offsets": [{"topic": topic, "partition_id": 0, "offset": 42, "metadata": "done"},
                          {"topic": topic, "partition_id": 1, "offset": 7}]}
    assert api.post(f"/v1/groups/{group}/offsets", commit).status == 200
    committed = api.get(f"/v1/groups/{group}/offsets?topic={topic}").body["offsets"]
    assert committed == [{"topic": topic, "partition_id": 0, "offset": 42, "metadata": "done"},
                         {"topic": topic, "partition_id": 1, "offset": 7, "metadata": ""}]

    stale = api.post(f"/v1/groups/{group}/offsets", {**commit, "member_epoch": member["member_epoch"] - 1,
                                                      "offsets": [{"topic": topic, "partition_id": 0, "offset": 99}]})
    assert stale.status == 409
    without_member = api.post(f"/v1/groups/{group}/offsets",
                              {"offsets": [{"topic": topic, "partition_id": 0, "offset": 99}]})
    assert without_member.status == 409
    assert api.get(f"/v1/groups/{group}/offsets").body["offsets"][0]["offset"] == 42


def test_a_group_without_members_takes_commits_without_a_member(api: HttpApi) -> None:
    group = fresh_group()
    answer = api.post(f"/v1/groups/{group}/offsets", {"offsets": [{"topic": "orders", "partition_id": 3, "offset": 5}]})
    assert answer.status == 200
    assert api.get(f"/v1/groups/{group}/offsets").body["offsets"] == [
        {"topic": "orders", "partition_id": 3, "offset": 5, "metadata": ""}]
    assert api.get(f"/v1/groups/{group}").status == 404


def test_a_commit_naming_a_partition_twice_is_refused_and_writes_nothing(api: HttpApi) -> None:
    group = fresh_group()
    twice = {"offsets": [{"topic": "orders", "partition_id": 3, "offset": 5},
                         {"topic": "orders", "partition_id": 4, "offset": 6},
                         {"topic": "orders", "partition_id": 3, "offset": 7}]}
    answer = api.post(f"/v1/groups/{group}/offsets", twice)
    assert answer.status == 422
    assert "appears more than once" in str(answer.body)
    assert api.get(f"/v1/groups/{group}/offsets").body["offsets"] == []
