"""bench/extraction.py: its scoring on hand-made examples, its dataset, the replayed run through the
product's extraction path into an embedded backend, and `--model` through the real openai SDK
against the local OpenAI stand-in."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from pydantic import ValidationError

from bench import extraction as xb
from shared.consolidation.extraction import EXTRACTION_SYSTEM, extraction_input
from tests.support.fake_openai import FakeOpenAI

HEADER = (
    "| conversation | category | gold | answer items | dropped | merged | stored "
    "| strict | P | R | lenient | P | R | forbidden: answer | stored |"
)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "SIGIL_DATA_DIR",
        "SIGIL_BACKEND",
        "SIGIL_MODEL",
        "SIGIL_FALLBACK_MODEL",
        "SIGIL_CONSOLIDATION_MODEL",
        "SIGIL_EMBEDDING_MODEL",
        "OPENAI_API_KEY",
        "OPENAI_BASE_URL",
    ):
        monkeypatch.delenv(name, raising=False)


def fact(text: str) -> xb.Fact:
    return xb.parse_fact(text)


# ---------------------------------------------------------------- scoring


def test_strict_and_lenient_matches_count_one_to_one() -> None:
    gold = [
        (fact("user | favourite-editor | Neovim"),),
        (fact("person/lena | occupation | nurse"),),
        (fact("user | lives-in | Porto"),),
        (fact("user | birthday | 14 August"),),
    ]
    stored = [
        xb.Fact("user", "favourite-editor", "neovim"),  # strict: the object differs only in case
        xb.Fact("lena", "job", "nurse in Leeds"),  # lenient: kindless subject, other key
        xb.Fact("user", "lives-in", "Porto (since last March)"),  # lenient: wordier object
        xb.Fact("user", "lives-in-city", "Porto"),  # the same fact again: Porto is taken
        xb.Fact("person/tom", "allergy", "wool"),  # in no gold fact
    ]
    s = xb.score(gold, stored)
    assert (s.gold, s.stored, s.strict, s.lenient) == (4, 5, 1, 3)
    assert (s.precision(), s.recall()) == (0.2, 0.25)
    assert (s.precision(True), s.recall(True)) == (0.6, 0.75)
    assert s.f1(True) == pytest.approx(2 * 0.6 * 0.75 / 1.35)


def test_alternatives_count_once_and_strict_needs_every_part() -> None:
    gold = [(fact("user | manager | Priya Nair"), fact("person/priya-nair | role | user's manager"))]
    both = [xb.Fact("user", "Manager", "priya nair"), xb.Fact("person/priya-nair", "role", "user's manager")]
    s = xb.score(gold, both)
    assert (s.strict, s.lenient, s.stored) == (1, 1, 2)
    # Same words, another predicate: lenient only.
    s = xb.score(gold, [xb.Fact("user", "boss", "Priya Nair")])
    assert (s.strict, s.lenient) == (0, 1)
    # Another subject: neither.
    s = xb.score(gold, [xb.Fact("person/tom", "manager", "Priya Nair")])
    assert (s.strict, s.lenient) == (0, 0)


def test_lenient_takes_the_best_pair_first() -> None:
    # "Friday at 2pm" could take either stored fact at 0.5 coverage or more; the full match wins
    # and the half match stays a false positive.
    gold = [(fact("user | team-retro | Friday at 2pm"),)]
    stored = [xb.Fact("user", "retro", "Friday at 11am"), xb.Fact("user", "retro-final", "Friday 2pm")]
    s = xb.score(gold, stored)
    assert (s.lenient, s.precision(True)) == (1, 0.5)
    assert xb.lenient_score(gold[0][0], stored[0]) == 0.5
    assert xb.lenient_score(gold[0][0], stored[1]) == 1.0


def test_content_words_keep_negations_and_empty_sets_score_none() -> None:
    assert xb.content_words("He doesn't eat meat, no dairy!") == {"not", "eat", "meat", "no", "dairy"}
    assert xb.coverage({"porto"}, {"porto", "march"}) == 1.0
    assert xb.coverage(set(), set()) == 1.0
    empty = xb.score([], [xb.Fact("user", "tone", "casual")])
    assert (empty.precision(), empty.recall(), empty.f1()) == (0.0, None, None)


def test_a_forbidden_check_needs_all_strings_none_of_the_exceptions_and_its_subject() -> None:
    check = xb.Forbidden(kind="negation", subject="user", contains=["meat"], unless=["not", "never"])
    assert check.broken_by(xb.Fact("user", "favourite_food", "Meat pies"))
    assert not check.broken_by(xb.Fact("user", "diet", "does not eat meat"))
    assert not check.broken_by(xb.Fact("person/jonas", "likes", "meat"))
    anyone = xb.Forbidden(kind="pii", contains=["okafor@example"])
    assert anyone.broken_by(xb.Fact("person/sam", "email", "sam.okafor@example.org"))
    assert xb.Fact("project/Atlas", "tech_stack", "Go").text() == "project atlas tech stack go"


# ---------------------------------------------------------------- the dataset


def test_the_dataset_validates_covers_every_category_and_has_a_recorded_answer_each() -> None:
    dataset = xb.load_dataset()
    assert 12 <= len(dataset.conversations) <= 20
    assert {c.category for c in dataset.conversations} == set(get_args(xb.Category))
    assert any(c.pii_redaction for c in dataset.conversations)
    for c in dataset.conversations:
        assert xb.replay_answer(c.id).strip(), c.id
        assert c.messages[0][0] == "user"
    kinds = {f.kind for c in dataset.conversations for f in c.forbidden}
    assert kinds == set(get_args(xb.ForbiddenKind))
    assert sum(len(c.gold_facts()) for c in dataset.conversations) >= 50


def conversation(**changes: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "id": "c1",
        "category": "preferences",
        "description": "d",
        "messages": [["user", "I use Neovim."], ["assistant", "Noted."]],
        "gold": ["user | favourite-editor | Neovim"],
    }
    return base | changes


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"gold": ["user | Favourite Editor | Neovim"]}, "is not normalised ('favourite-editor')"),
        ({"gold": ["user | favourite-editor"]}, "is not 'subject | predicate | object'"),
        ({"gold": [[]]}, "a gold fact lists no triple"),
        ({"category": "gossip"}, "category"),
        ({"messages": [["system", "x"], ["user", "y"]]}, "messages"),
        ({"forbidden": [{"kind": "pii", "contains": []}]}, "contains"),
    ],
)
def test_a_malformed_conversation_is_refused_with_the_reason(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=re.escape(message)):
        xb.Dataset.model_validate({"version": 1, "conversations": [conversation(**changes)]})


def test_repeated_ids_are_refused() -> None:
    with pytest.raises(ValidationError, match="conversation ids repeated: c1"):
        xb.Dataset.model_validate({"version": 1, "conversations": [conversation(), conversation()]})


# ---------------------------------------------------------------- the replayed run


def test_the_replayed_run_prints_the_tables_and_the_pipeline_filters_what_it_should(
    capsys: pytest.CaptureFixture[str],
) -> None:
    results = xb.main(["--embedding-model", "none"])
    out = capsys.readouterr().out
    dataset = xb.load_dataset()
    assert HEADER in out
    assert "| category | conversations | gold | stored | strict P | strict R | strict F1 " in out
    assert "| kind | checks | in the model's answer | stored (got through) |" in out
    for c in dataset.conversations:
        assert f"| {c.id} | {c.category} |" in out
    total = sum((r.score for r in results), xb.Score())
    assert total.gold == sum(len(c.gold_facts()) for c in dataset.conversations)
    assert total.stored > 0 and 0 < total.strict <= total.lenient <= min(total.gold, total.stored)
    by_id = {r.conversation.id: r for r in results}
    # The injection scan drops the echoed instructions; redaction keeps the address and the
    # password out, though the recorded answers hold them.
    assert by_id["injection-memory"].outcome.dropped == 1
    assert by_id["injection-admin"].outcome.dropped == 1
    for name in ("pii-contact", "secret-password"):
        r = by_id[name]
        assert r.in_answer and not r.got_through, name
    assert ("user", "email", "[REDACTED:email]") in {
        (f.subject, f.predicate, f.object) for f in by_id["pii-contact"].stored
    }
    # Small talk has no gold: whatever is stored there lowers precision and nothing else.
    assert by_id["small-talk-weather"].score.recall() is None


# ---------------------------------------------------------------- --model through the openai SDK


def test_a_real_model_gets_the_products_prompt_and_its_answer_goes_through_the_same_pipeline(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    dataset = {c.id: c for c in xb.load_dataset().conversations}
    chosen = ["pref-editor", "injection-memory"]
    by_prompt = {extraction_input(xb.records(dataset[i], f"xb-{i}")): xb.replay_answer(i) for i in chosen}

    def answer(body: dict[str, Any]) -> str:
        return by_prompt[body["messages"][-1]["content"]]

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    with FakeOpenAI(answer) as fake:
        results = xb.main(
            [
                "--model",
                "openai/cheap-model",
                "--base-url",
                fake.base_url,
                "--conversations",
                ",".join(chosen),
                "--embedding-model",
                "none",
                "--record",
                str(tmp_path / "recorded"),
            ]
        )
    out = capsys.readouterr().out
    assert "## Extraction: openai/cheap-model (2 conversations" in out
    assert HEADER in out
    assert len(fake.requests) == 2
    for body, name in zip(fake.requests, chosen, strict=True):
        assert body["model"] == "cheap-model"
        assert body["messages"][0] == {"role": "system", "content": EXTRACTION_SYSTEM}
        assert body["messages"][-1]["content"] in by_prompt
        assert by_prompt[body["messages"][-1]["content"]] == xb.replay_answer(name)
    replayed = xb.run([dataset[i] for i in chosen], xb.replay_model, embedding_model="none")
    assert [sorted(map(repr, r.stored)) for r in results] == [sorted(map(repr, r.stored)) for r in replayed]
    assert [r.score for r in results] == [r.score for r in replayed]
    assert all(r.tokens_in > 0 and r.tokens_out > 0 for r in results)
    # --record keeps the answers as the product read them (ConsolidationModel strips them).
    for name in chosen:
        assert (tmp_path / "recorded" / f"{name}.txt").read_text() == xb.replay_answer(name).strip()


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--model", "nope/some-model"],
            "Unknown model provider 'nope' in 'nope/some-model'; known providers: openai",
        ),
        (["--model", "gpt-4.1-mini"], "is not of the form provider/model"),
        (["--model", "openai/gpt-4.1-mini"], "neither OPENAI_API_KEY nor OPENAI_BASE_URL is set"),
        (["--conversations", "pref-editor,nope"], "unknown conversation ids: nope"),
    ],
)
def test_a_model_or_conversation_it_cannot_use_is_a_clear_error(argv: list[str], message: str) -> None:
    with pytest.raises(SystemExit) as exc:
        xb.main(argv)
    assert isinstance(exc.value.code, str)
    assert exc.value.code.startswith("bench/extraction.py: ")
    assert message in exc.value.code


def test_a_conversation_without_a_recorded_answer_is_named(tmp_path: Path) -> None:
    data = tmp_path / "conversations.yaml"
    data.write_text(yaml.safe_dump({"version": 1, "conversations": [conversation(id="unrecorded")]}))
    with pytest.raises(SystemExit, match="no recorded answer for 'unrecorded'"):
        xb.main(["--data", str(data), "--embedding-model", "none"])
