"""The agent's skill cache over the S3 adapter (moto): a warm read of a workspace's skills makes
no S3 call, an edit made elsewhere shows after the TTL, a write through the cache at once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shared.adapters.aws import clients
from shared.adapters.aws.skills import S3SkillStore
from shared.ports import SkillLink
from shared.skills import SKILL_TTL_S, CachedSkills, available_skills
from tests.support import moto_aws


def skill_md(name: str, body: str) -> bytes:
    return f"---\nname: {name}\ndescription: The {name} skill.\n---\n{body}\n".encode()


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[tuple[S3SkillStore, list[str]]]:
    with moto_aws.persistent_mock(), moto_aws.moto_like_aws():
        bucket = moto_aws.provision(moto_aws.name_for(tmp_path)).skills_bucket
        client = clients.s3(moto_aws.REGION)
        calls: list[str] = []

        def count(event_name: str, **kwargs: Any) -> None:
            calls.append(event_name.rsplit(".", 1)[-1])

        client.meta.events.register("before-call.s3", count)
        try:
            yield S3SkillStore(bucket, client=client), calls
        finally:
            client.meta.events.unregister("before-call.s3", count)


def test_a_warm_read_makes_no_s3_call_and_an_edit_shows_after_the_ttl(
    s3: tuple[S3SkillStore, list[str]],
) -> None:
    store, calls = s3
    for name in ("alpha", "beta"):
        store.put_skill("ws1", name, {"SKILL.md": skill_md(name, "v1"), "references/r.md": b"r"})
    store.link_skill("ws2", "alpha", SkillLink("ws1", "alpha"))
    now = [0.0]
    cached = CachedSkills(store, clock=lambda: now[0])

    def a_turn() -> list[str]:
        # What a turn and its skill tool read: the catalogue, one body, one referenced file.
        found = [s.body for s in available_skills(cached, "ws1") + available_skills(cached, "ws2")]
        cached.list_files("ws2", "alpha")
        cached.read_file("ws2", "alpha", "references/r.md")
        return found

    calls.clear()
    assert a_turn() == ["v1", "v1", "v1"]
    cold = list(calls)
    calls.clear()
    assert a_turn() == ["v1", "v1", "v1"]
    assert cold and calls == []
    # An edit made by another process shows once the TTL has passed
    store.put_skill("ws1", "alpha", {"SKILL.md": skill_md("alpha", "v2")})
    assert a_turn()[0] == "v1"
    now[0] += SKILL_TTL_S + 1
    assert a_turn() == ["v2", "v1", "v2"]
    # A write through the cache applies in this process at once
    cached.put_skill("ws1", "beta", {"SKILL.md": skill_md("beta", "v3")})
    assert a_turn() == ["v2", "v3", "v2"]
