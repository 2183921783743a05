"""SKILL.md parsing (agentskills.io front matter + body), loading and the trigger modes."""

from __future__ import annotations

from pathlib import Path

import pytest

from shared.skills import Skill, SkillError, catalogue, load_skills, local_skills, parse_skill, select_skills

SPEC_EXAMPLE = """---
name: infra-ops
description: Infrastructure operations expertise for Kubernetes and Terraform...
license: MIT
compatibility: Requires kubectl, terraform CLI
allowed-tools: Bash(kubectl:*) Bash(terraform:*)
metadata:
  author: sean
  version: "1.0"
  gateway:trigger: auto          # auto | manual | keyword
  gateway:keywords: server deploy kubernetes terraform
  gateway:workspace: homelab
---

You are an infrastructure operations expert...
"""


def skill_md(name: str, trigger: str, keywords: str = "", body: str = "Body.") -> str:
    meta = f"  gateway:trigger: {trigger}\n" + (f"  gateway:keywords: {keywords}\n" if keywords else "")
    return f"---\nname: {name}\ndescription: The {name} skill.\nmetadata:\n{meta}---\n{body}\n"


def test_the_spec_example_parses() -> None:
    skill = parse_skill(SPEC_EXAMPLE)
    assert skill.name == "infra-ops"
    assert skill.description == "Infrastructure operations expertise for Kubernetes and Terraform..."
    assert (skill.license, skill.compatibility) == ("MIT", "Requires kubectl, terraform CLI")
    assert skill.allowed_tools == "Bash(kubectl:*) Bash(terraform:*)"
    assert skill.trigger == "auto"  # the comment after the value is dropped
    assert skill.keywords == ("server", "deploy", "kubernetes", "terraform")
    assert skill.metadata["version"] == "1.0" and skill.metadata["gateway:workspace"] == "homelab"
    assert skill.body == "You are an infrastructure operations expert..."


def test_a_plain_agentskills_skill_is_auto() -> None:
    skill = parse_skill("---\nname: notes\ndescription: Taking notes.\n---\n# Notes\nWrite them down.\n")
    assert (skill.trigger, skill.keywords, skill.body) == ("auto", (), "# Notes\nWrite them down.")


AUTO = Skill(name="always", description="d", trigger="auto")
KEYWORD = Skill(name="k8s", description="d", trigger="keyword", keywords=("kubernetes", "k8s-pod"))
MANUAL = Skill(name="infra-ops", description="d", trigger="manual")


def names(text: str) -> list[str]:
    return [s.name for s in select_skills([AUTO, KEYWORD, MANUAL], text)]


def test_auto_is_listed_in_the_catalogue_and_never_loaded_directly() -> None:
    assert names("") == []
    assert names("anything at all, even always") == []
    assert names("use skill: always") == ["always"]  # asked for by name, any skill is loaded
    assert [s.name for s in catalogue([AUTO, KEYWORD, MANUAL])] == ["always", "k8s"]


def test_keyword_matches_whole_words_case_insensitively() -> None:
    assert names("My Kubernetes cluster is down") == ["k8s"]
    assert names("is the k8s-pod up?") == ["k8s"]
    assert names("kubernetesish things") == []
    assert names("notkubernetes") == []


def test_manual_only_when_asked_by_name() -> None:
    assert names("help with infra-ops") == []
    assert names("Use skill: infra-ops and check the servers") == ["infra-ops"]
    assert names("use skill: infra-opsx") == []
    assert names("use skill: other") == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("name: x\ndescription: y\n", "starts with a '---'"),
        ("---\nname: x\ndescription: y\n", "no closing '---'"),
        ("---\ndescription: y\n---\n", "name ''"),
        ("---\nname: Bad_Name\ndescription: y\n---\n", "name 'Bad_Name'"),
        ("---\nname: x\n---\n", "description is required"),
        ("---\nname: x\ndescription: y\nmetadata:\n  gateway:trigger: sometimes\n---\n", "gateway:trigger"),
        (
            "---\nname: x\ndescription: y\nmetadata:\n  gateway:trigger: keyword\n---\n",
            "needs gateway:keywords",
        ),
        ("---\nname: x\ndescription: y\ntags: [a, b]\n---\n", "'tags': a list ([...]) is not"),
        ("---\nname: x\ndescription: y\nlicense: {a: b}\n---\n", "'license': a map ({...}) is not"),
        ("---\nname: x\ndescription: 'open\n---\n", "must be closed on its line"),
        ("---\nname: x\n  nested: no\ndescription: y\n---\n", "only 'metadata'"),
        ("---\nname: x\ndescription: y\njust text\n---\n", "expected 'key: value'"),
        ("---\nname: x\nname: z\ndescription: y\n---\n", "appears twice"),
    ],
)
def test_bad_files_are_errors_naming_the_file(text: str, problem: str) -> None:
    with pytest.raises(SkillError, match=r"bad/SKILL\.md") as caught:
        parse_skill(text, "bad/SKILL.md")
    assert problem in str(caught.value)


def test_loading_a_directory(tmp_path: Path) -> None:
    for name, trigger in [("zeta", "auto"), ("alpha", "manual")]:
        (tmp_path / name).mkdir()
        (tmp_path / name / "SKILL.md").write_text(skill_md(name, trigger))
    (tmp_path / "README.md").write_text("not a skill")
    assert [(s.name, s.trigger) for s in load_skills(tmp_path)] == [("alpha", "manual"), ("zeta", "auto")]
    assert load_skills(tmp_path / "missing") == []


def test_a_bad_file_in_a_directory_names_its_path(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "SKILL.md").write_text("no front matter")
    with pytest.raises(SkillError, match=str(tmp_path / "broken" / "SKILL.md")):
        load_skills(tmp_path)


def test_the_name_must_match_the_folder(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "SKILL.md").write_text(skill_md("two", "auto"))
    with pytest.raises(SkillError, match="differs from its folder"):
        load_skills(tmp_path)


def test_local_skills_reads_the_workspace_folder(tmp_path: Path) -> None:
    folder = tmp_path / "workspaces" / "homelab" / "skills" / "infra-ops"
    folder.mkdir(parents=True)
    (folder / "SKILL.md").write_text(SPEC_EXAMPLE)
    load = local_skills(tmp_path)
    assert [s.name for s in load("homelab")] == ["infra-ops"]
    assert load("other") == []


def test_the_gateway_loader_leaves_a_broken_skill_out_instead_of_failing_every_turn(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    skills = tmp_path / "workspaces" / "ws1" / "skills"
    (skills / "good").mkdir(parents=True)
    (skills / "good" / "SKILL.md").write_text("---\nname: good\ndescription: fine\n---\nBe good.\n")
    (skills / "broken").mkdir()
    (skills / "broken" / "SKILL.md").write_text("no front matter at all\n")
    with pytest.raises(SkillError):
        load_skills(skills)
    loaded = local_skills(tmp_path)("ws1")
    assert [s.name for s in loaded] == ["good"]
    assert "skill left out" in caplog.text


# Front matter as published skills write it, each read as PyYAML reads it (the gateway's parser
# has no YAML library; tests/ may use one to say what the right reading is).
YAML_FORMS = {
    "folded": "description: >\n  Reads PDFs\n  and fills forms.\n\n  Use it for PDFs.\nlicense: MIT\n",
    "folded, stripped, a # kept": "description: >-\n  Reads PDFs # not a comment\n  and forms.\n",
    "literal": "description: |\n  Line one.\n  Line two.\n\ncompatibility: Needs qpdf\n",
    "literal, kept": "description: Reads PDFs.\nlicense: |+\n  MIT\n\n\nmetadata:\n  author: ada\n",
    "an indentation digit": "description: >2\n    Indented more.\n  Then not.\n",
    "deeper lines folded apart": "description: >\n  Text\n    deeper\n  text\n",
    "plain over lines": "description: Reads PDFs\n  and fills forms.\n\n  Then more.\nlicense: MIT\n",
    "plain on the next line": "description:\n  Reads PDFs.\n",
    "in metadata": "description: d\nmetadata:\n  notes: >\n    folded\n    note\n  author: ada\n",
    "quoted": "description: \"Reads: PDFs\"\nlicense: 'MIT # or not'\n",
}


@pytest.mark.parametrize("front", list(YAML_FORMS.values()), ids=list(YAML_FORMS))
def test_multi_line_values_read_as_yaml_reads_them(front: str) -> None:
    import yaml

    expected = yaml.safe_load(f"name: pdf\n{front}")
    skill = parse_skill(f"---\nname: pdf\n{front}---\nBody.\n")
    assert skill.description == expected["description"].strip()
    assert (skill.license, skill.compatibility) == (expected.get("license"), expected.get("compatibility"))
    assert skill.metadata == (expected.get("metadata") or {})
    assert skill.body == "Body."


def test_a_block_line_indented_less_than_its_first_is_an_error_at_its_line() -> None:
    text = "---\nname: pdf\ndescription: |\n    deep\n  shallow\n---\n"
    with pytest.raises(SkillError, match=r"^pdf/SKILL\.md:5: this line of the block is indented less"):
        parse_skill(text, "pdf/SKILL.md")


def test_every_broken_rule_is_reported_at_its_line_in_one_error() -> None:
    text = (
        "---\nname: Bad--Name\ndescription: \nfoo: bar\nmetadata:\n  gateway:trigger: keyword\n---\nBody.\n"
    )
    with pytest.raises(SkillError) as caught:
        parse_skill(text, "src/Bad--Name/SKILL.md")
    assert str(caught.value).splitlines() == [
        "src/Bad--Name/SKILL.md:2: name 'Bad--Name' is not lowercase letters, digits and hyphens (1-64), "
        "without a leading, trailing or doubled hyphen",
        "src/Bad--Name/SKILL.md:3: description is required",
        "src/Bad--Name/SKILL.md:4: 'foo' is not a SKILL.md field (allowed-tools, compatibility, "
        "description, license, metadata, name); put extensions in metadata",
        "src/Bad--Name/SKILL.md:6: gateway:trigger keyword needs gateway:keywords",
    ]


def test_a_value_the_reader_cannot_take_does_not_hide_the_later_errors() -> None:
    """`tags: [a, b]` used to end the reading: every later broken rule went unreported."""
    text = "---\nname: x\ntags: [a, b]\ndescription:\nfoo: bar\nlicense: [MIT]\n  - more\n---\nBody.\n"
    with pytest.raises(SkillError) as caught:
        parse_skill(text, "x/SKILL.md")
    assert str(caught.value).splitlines() == [
        "x/SKILL.md:3: 'tags': a list ([...]) is not a SKILL.md value: write it as text, e.g. a, b",
        "x/SKILL.md:3: 'tags' is not a SKILL.md field (allowed-tools, compatibility, description, "
        "license, metadata, name); put extensions in metadata",
        "x/SKILL.md:4: description is required",
        "x/SKILL.md:5: 'foo' is not a SKILL.md field (allowed-tools, compatibility, description, "
        "license, metadata, name); put extensions in metadata",
        "x/SKILL.md:6: 'license': a list ([...]) is not a SKILL.md value: write it as text, e.g. a, b",
    ]


def test_an_unreadable_name_is_reported_once() -> None:
    with pytest.raises(SkillError) as caught:
        parse_skill("---\nname: [x]\ndescription: y\n---\n", "x/SKILL.md")
    assert str(caught.value).splitlines() == [
        "x/SKILL.md:2: 'name': a list ([...]) is not a SKILL.md value: write it as text, e.g. a, b"
    ]
