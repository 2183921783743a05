"""SkillStore contract, on every adapter set (files in the data directory; S3 on moto): install
replaces a skill's files, a link reads the one stored copy so an edit propagates, a linked-to skill
can't be removed, and names and paths never leave the workspace's folder."""

from __future__ import annotations

import pytest

from shared.errors import BadRequest, ConcurrencyConflict, NotFound
from shared.ports import SkillLink, SkillStore
from shared.skills import available_skills

from .factories import ContractBackend


def skill_md(name: str, body: str = "Do the thing.", description: str = "A skill.") -> bytes:
    return f"---\nname: {name}\ndescription: {description}\n---\n{body}\n".encode()


@pytest.fixture
def store(contract: ContractBackend) -> SkillStore:
    return contract.backend.skills


def test_a_put_skill_reads_back_and_a_second_put_replaces_every_file(store: SkillStore, ws_a: str) -> None:
    store.put_skill(
        ws_a, "notes", {"SKILL.md": skill_md("notes"), "references/a.md": b"# A", "assets/x.txt": b"x"}
    )
    assert store.list_skills(ws_a) == ["notes"]
    assert store.list_files(ws_a, "notes") == ["SKILL.md", "assets/x.txt", "references/a.md"]
    assert store.read_file(ws_a, "notes", "references/a.md") == b"# A"
    store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes", "v2"), "references/b.md": b"# B"})
    assert store.list_files(ws_a, "notes") == ["SKILL.md", "references/b.md"]
    assert store.read_file(ws_a, "notes", "references/a.md") is None
    assert [s.body for s in available_skills(store, ws_a)] == ["v2"]


def test_workspaces_do_not_see_each_others_skills(store: SkillStore, ws_a: str, ws_b: str) -> None:
    store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes")})
    assert store.list_skills(ws_b) == []
    assert store.read_file(ws_b, "notes", "SKILL.md") is None
    assert store.list_files(ws_b, "notes") == []
    assert store.remove_skill(ws_b, "notes") is False
    assert store.list_skills(ws_a) == ["notes"]


def test_a_copy_is_independent_and_a_link_propagates_edits(store: SkillStore, ws_a: str, ws_b: str) -> None:
    store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes", "v1"), "references/r.md": b"r1"})
    files = {p: store.read_file(ws_a, "notes", p) or b"" for p in store.list_files(ws_a, "notes")}
    store.put_skill(ws_b, "copied", {**files, "SKILL.md": skill_md("copied", "v1")})
    store.link_skill(ws_b, "notes", SkillLink(ws_a, "notes"))
    assert store.list_skills(ws_b) == ["copied", "notes"]
    assert store.link_of(ws_b, "notes") == SkillLink(ws_a, "notes")
    assert store.link_of(ws_b, "copied") is None
    # When the source is edited
    store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes", "v2"), "references/r.md": b"r2"})
    # Then the link reads the edit, the copy does not
    assert [(s.name, s.body) for s in available_skills(store, ws_b)] == [("copied", "v1"), ("notes", "v2")]
    assert store.read_file(ws_b, "notes", "references/r.md") == b"r2"
    assert store.list_files(ws_b, "notes") == ["SKILL.md", "references/r.md"]
    assert store.links_to(ws_a, "notes") == [SkillLink(ws_b, "notes")]


def test_a_linked_to_skill_is_not_removed_until_its_links_are(
    store: SkillStore, ws_a: str, ws_b: str
) -> None:
    store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes")})
    store.link_skill(ws_b, "notes", SkillLink(ws_a, "notes"))
    with pytest.raises(ConcurrencyConflict, match=f"linked from {ws_b}/notes"):
        store.remove_skill(ws_a, "notes")
    with pytest.raises(ConcurrencyConflict, match="is a link to"):
        store.put_skill(ws_b, "notes", {"SKILL.md": skill_md("notes")})
    assert store.remove_skill(ws_b, "notes") is True
    assert store.list_skills(ws_b) == []
    assert store.remove_skill(ws_a, "notes") is True
    assert store.list_skills(ws_a) == []


def test_a_link_to_a_link_reads_the_source_and_bad_links_are_refused(
    store: SkillStore, ws_a: str, ws_b: str
) -> None:
    store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes", "source")})
    store.link_skill(ws_b, "notes", SkillLink(ws_a, "notes"))
    store.link_skill(ws_b, "again", SkillLink(ws_b, "notes"))
    assert store.link_of(ws_b, "again") == SkillLink(ws_a, "notes")
    with pytest.raises(NotFound):
        store.link_skill(ws_b, "ghost", SkillLink(ws_a, "ghost"))
    with pytest.raises(ConcurrencyConflict, match="already has"):
        store.link_skill(ws_b, "notes", SkillLink(ws_a, "notes"))
    with pytest.raises(ConcurrencyConflict, match="itself"):
        store.link_skill(ws_a, "notes", SkillLink(ws_a, "notes"))


@pytest.mark.parametrize(
    "path", ["../x", "/etc/passwd", "a/../../b", "a//b", "./SKILL.md", ".sigil-link.json", "C:x"]
)
def test_paths_outside_the_folder_are_refused(store: SkillStore, ws_a: str, path: str) -> None:
    with pytest.raises(BadRequest):
        store.put_skill(ws_a, "notes", {"SKILL.md": skill_md("notes"), path: b"x"})
    with pytest.raises(BadRequest):
        store.read_file(ws_a, "notes", path)
    assert store.list_skills(ws_a) == []


@pytest.mark.parametrize("name", ["..", "Bad", "-x", "a--b", "a/b", ""])
def test_bad_names_are_refused(store: SkillStore, ws_a: str, name: str) -> None:
    with pytest.raises(BadRequest):
        store.put_skill(ws_a, name, {"SKILL.md": skill_md("x")})
    with pytest.raises(BadRequest):
        store.read_file(ws_a, name, "SKILL.md")
