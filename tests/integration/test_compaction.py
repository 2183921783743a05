"""Compaction end to end with a function-backed consolidation model, on the embedded set and on
the AWS set over moto (tests/contract/factories.py).

The conversation is 60 turns (120 messages) committed the way the turn commits them: each save of
the session carries the messages that roll out of its 20-message window as Tier-1 records, so
100 messages are in Tier 1, two complete batches of 50. Ids and times are fixed, and the
consolidation run gets a fixed clock and run id, so two backends seeded alike and consolidated
alike hold the same data item for item: a run cut off half-way and restarted (as Lambda retries
an event, with the same run id) is compared with an uninterrupted one on a second backend.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from shared.backend import Backend
from shared.consolidation.compaction import (
    CompactionResult,
    batch_summary_id,
    compact_session,
    rolling_summary_id,
)
from shared.consolidation.deadline import Deadline
from shared.consolidation.extraction import ExtractedFact, FactOutcome, FactWriter
from shared.errors import ProviderError
from shared.memory.scope import owner_scope
from shared.models import WORKSPACE_WIDE, FactCategory
from tests.contract.factories import BACKEND_FACTORIES
from tests.support.consolidation import RUN_AT, SID, T0, USER, WS, FakeConsolidator
from tests.support.consolidation import seed as seed_conversation


def seed(backend: Backend) -> None:
    assert seed_conversation(backend).rolled_out_count == 100


# ---------------------------------------------------------------- backends and dumps


@pytest.fixture(params=sorted(BACKEND_FACTORIES))
def open_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Callable[[str], contextlib.AbstractContextManager[Backend]]:
    factory = BACKEND_FACTORIES[request.param]

    @contextlib.contextmanager
    def opened(name: str) -> Iterator[Backend]:
        with factory(tmp_path / name) as contract:
            yield contract.backend

    return opened


def dump(backend: Backend) -> dict[str, Any]:
    """Everything compaction may write, as plain data."""
    session = backend.sessions.get(WS, SID)
    return {
        "session": session.model_dump(mode="json") if session else None,
        "messages": [r.model_dump(mode="json") for r in backend.memory.get_messages(WS, SID, limit=1000)],
        "summaries": [
            s.model_dump(mode="json")
            for s in backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, limit=1000)
        ],
        "triples": [
            t.model_dump(mode="json")
            for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE, limit=1000)
        ],
        "checkpoint": backend.consolidation.get_checkpoint(WS, f"compact:{SID}"),
        "indexed": backend.index.count(WS),
    }


def run(backend: Backend, fake: FakeConsolidator, **kwargs: Any) -> CompactionResult:
    kwargs.setdefault("run_id", "run-1")
    kwargs.setdefault("clock", lambda: RUN_AT)
    return compact_session(backend, fake.model, WS, SID, **kwargs)


def active(backend: Backend) -> dict[tuple[str, str], Any]:
    return {
        (t.subject, t.predicate): t
        for t in backend.memory.list_triples(WS, scope=WORKSPACE_WIDE, limit=1000)
        if t.status == "active"
    }


# ---------------------------------------------------------------- the tests


def test_120_messages_give_two_summaries_a_rolling_summary_and_the_expected_facts(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("one") as backend:
        seed(backend)
        fake = FakeConsolidator()
        result = run(backend, fake)

        assert (result.status, result.summaries, result.checkpoint) == ("done", 2, 99)
        assert fake.calls == {"summary": 2, "rolling": 1, "extract": 2}
        summaries = backend.memory.list_summaries(WS, scope=WORKSPACE_WIDE, session_id=SID, limit=100)
        batches = [s for s in summaries if s.kind == "batch"]
        [rolling] = [s for s in summaries if s.kind == "rolling"]
        assert [(s.id, s.first_seq, s.last_seq) for s in batches] == [
            (batch_summary_id(SID, 0), 0, 49),
            (batch_summary_id(SID, 50), 50, 99),
        ]
        assert batches[0].text == "Messages 0-49: small talk; topics PostgreSQL, Sarah, dark mode, short."
        assert all(s.user_id == USER and s.run_id == "run-1" and s.created_at == RUN_AT for s in summaries)
        assert (batches[0].start_at, batches[1].end_at) == (T0, T0 + timedelta(minutes=98, seconds=5))
        assert (rolling.id, rolling.first_seq, rolling.last_seq) == (rolling_summary_id(SID), 0, 99)
        assert rolling.text == f"{batches[0].text} Then: {batches[1].text}"
        session = backend.sessions.get(WS, SID)
        assert session is not None
        assert (session.summary, session.last_compaction) == (rolling.text, RUN_AT)
        # The conversation's own timestamps are untouched, and so is every Tier-1 message.
        assert session.updated_at == T0 + timedelta(minutes=118, seconds=5)
        assert backend.memory.count_messages(WS, SID) == 100

        facts = active(backend)
        assert sorted(facts) == [
            (USER, "editor-theme"),
            (USER, "project-database"),
            (USER, "verbosity"),
            ("person/sarah-chen", "role"),
        ]
        theme, style = facts[(USER, "editor-theme")], facts[(USER, "verbosity")]
        # Found in both batches: one record, refreshed by the second; its provenance is the two
        # messages that said it (turns 3 and 30, as the model cited them), not the batches' ends.
        assert (theme.object, theme.category, theme.reinforced_count) == ("dark mode", "preference", 1)
        assert theme.message_ids == ["t03.u", "t30.u"]
        # A style seen again is reinforced, with the newest wording.
        assert (style.object, style.category, style.reinforced_count) == ("brief, short answers", "style", 2)
        sarah = facts[("person/sarah-chen", "role")]
        assert (sarah.object, sarah.category, sarah.user_id) == ("Alice's manager", "entity", USER)
        assert all(
            t.source == "consolidation" and t.run_id == "run-1" and t.session_id == SID
            for t in facts.values()
        )
        # The injected "standing order" was dropped; turn 55's tea is not in a complete batch yet.
        assert result.facts_dropped == 1
        assert not any("tea" in t.object or "obey" in t.object for t in facts.values())
        assert (result.facts_extracted, result.facts_merged, result.facts_reinforced) == (4, 2, 1)
        # Summaries and facts are searchable: 2 summary documents and 4 fact documents.
        assert backend.index.count(WS) == 6


def test_a_second_run_changes_nothing(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("one") as backend:
        seed(backend)
        run(backend, FakeConsolidator())
        before = dump(backend)
        fake = FakeConsolidator()
        again = run(backend, fake, run_id="run-2", clock=lambda: RUN_AT + timedelta(hours=1))
        assert (again.status, again.summaries, again.checkpoint) == ("done", 0, 99)
        assert fake.calls == {"summary": 0, "rolling": 0, "extract": 0}
        assert dump(backend) == before


def test_a_run_stopped_by_its_deadline_continues_next_time_to_the_same_state(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("uninterrupted") as reference:
        seed(reference)
        run(reference, FakeConsolidator())
        expected = dump(reference)
    with open_backend("interrupted") as backend:
        seed(backend)
        # Each model call takes 45 s of a 100 s budget: after batch 1 (a summary and an
        # extraction, 90 s) too little is left to start another, so the run stops between batches.
        now = [0.0]

        def slow(kind: str, n: int) -> None:
            now[0] += 45.0

        first = run(backend, FakeConsolidator(slow), deadline=Deadline(100.0, clock=lambda: now[0]))
        assert (first.status, first.summaries, first.checkpoint) == ("partial", 1, 49)
        assert backend.consolidation.get_checkpoint(WS, f"compact:{SID}") == "49"
        # The lease went with the run: the next one is not kept waiting.
        second = run(backend, FakeConsolidator())
        assert (second.status, second.summaries, second.checkpoint) == ("done", 1, 99)
        assert dump(backend) == expected


def test_a_run_killed_by_a_model_error_and_retried_ends_as_an_uninterrupted_one(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("uninterrupted") as reference:
        seed(reference)
        run(reference, FakeConsolidator())
        expected = dump(reference)
    with open_backend("interrupted") as backend:
        seed(backend)

        def fail_second_summary(kind: str, n: int) -> None:
            if kind == "summary" and n == 2:
                raise ProviderError("the model is down")

        with pytest.raises(ProviderError):
            run(backend, FakeConsolidator(fail_second_summary))
        assert backend.consolidation.get_checkpoint(WS, f"compact:{SID}") == "49"
        # The retry of the same event (same run id) picks up at batch 2.
        retry = run(backend, FakeConsolidator())
        assert (retry.status, retry.summaries) == ("done", 1)
        assert dump(backend) == expected


def test_a_batch_that_fails_after_writing_is_redone_without_duplicates(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    """The hardest place to die: batch 2's summary, facts and rolling summary are written, and the
    run dies before its checkpoint (here: the fold's model call fails). The retry redoes batch 2."""
    with open_backend("uninterrupted") as reference:
        seed(reference)
        run(reference, FakeConsolidator())
        expected = dump(reference)
    with open_backend("interrupted") as backend:
        seed(backend)

        def fail_fold(kind: str, n: int) -> None:
            if kind == "rolling":
                raise ProviderError("the model is down")

        with pytest.raises(ProviderError):
            run(backend, FakeConsolidator(fail_fold))
        retry = run(backend, FakeConsolidator())
        assert (retry.status, retry.summaries) == ("done", 1)
        after = dump(backend)
        assert after == expected
        # The style seen once per batch was reinforced once per batch, not once per attempt.
        assert active(backend)[(USER, "verbosity")].reinforced_count == 2


def test_two_runs_for_one_session_never_overlap(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("one") as backend:
        seed(backend)
        inside, go_on = threading.Event(), threading.Event()

        def hold(kind: str, n: int) -> None:
            if kind == "summary" and n == 1:
                inside.set()
                assert go_on.wait(30), "the test never let the first run go on"

        outcome: dict[str, CompactionResult | BaseException] = {}

        def first_run() -> None:
            try:
                outcome["first"] = run(backend, FakeConsolidator(hold), run_id="run-a")
            except BaseException as exc:  # reported by the assertion below
                outcome["first"] = exc

        thread = threading.Thread(target=first_run)
        thread.start()
        try:
            assert inside.wait(30)
            # While the first run is inside its first batch, a second one gets "busy".
            fake = FakeConsolidator()
            second = run(backend, fake, run_id="run-b")
            assert (second.status, second.summaries) == ("busy", 0)
            assert fake.calls == {"summary": 0, "rolling": 0, "extract": 0}
            # Even with the same run id (a duplicate delivery of the same event).
            assert run(backend, FakeConsolidator(), run_id="run-a").status == "busy"
        finally:
            go_on.set()
            thread.join(60)
        first = outcome["first"]
        assert isinstance(first, CompactionResult)
        assert (first.status, first.summaries) == ("done", 2)
        # Once it is over, a new run may start (and has nothing left to do).
        assert run(backend, FakeConsolidator(), run_id="run-c").status == "done"


# ---------------------------------------------------------------- near-duplicates by embedding


class KeywordEmbedder:
    """A deterministic Embedder: a text's vector is set by the first keyword it contains, so a test
    decides which facts are near-duplicates (the Embedder port's contract, nothing more)."""

    dimensions = 3

    def __init__(self, model_id: str = "keywords-v1") -> None:
        self.model_id = model_id
        self.calls: list[list[str]] = []

    VECTORS: dict[str, list[float]] = {
        "dark": [1.0, 0.0, 0.0],
        "night": [0.98, 0.199, 0.0],  # cosine 0.98 with "dark"
        "terse": [0.0, 0.0, 1.0],
        "brief": [0.0, 0.19, 0.98],  # cosine 0.98 with "terse"
        "tea": [0.6, 0.8, 0.0],  # cosine 0.6 with "dark"
    }

    def embed(self, texts: Any) -> list[list[float]]:
        self.calls.append(list(texts))
        return [next((v for k, v in self.VECTORS.items() if k in t), [0.0, 1.0, 0.0]) for t in texts]


def write_facts(
    backend: Backend, facts: list[tuple[FactCategory, str, str]], *, message: str, at: datetime
) -> FactOutcome:
    writer = FactWriter(
        memory=backend.memory,
        index=backend.index,
        embedder=backend.embedder,
        workspace_id=WS,
        session_id=SID,
        user_id=USER,
        scope=owner_scope(SID, [USER], group=False),  # a direct conversation's batch
        run_id="run-1",
        provenance=[message],
        now=at,
    )
    return writer.store([ExtractedFact(category, key, value) for category, key, value in facts])


def test_a_near_duplicate_by_embedding_refreshes_the_fact_it_repeats(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("one") as backend:
        backend.embedder = KeywordEmbedder()
        first = write_facts(
            backend,
            [("preference", "editor-theme", "dark mode"), ("style", "tone", "terse replies")],
            message="m1",
            at=RUN_AT,
        )
        assert (first.extracted, first.merged) == (2, 0)
        later = RUN_AT + timedelta(days=1)
        # Other keys, same meanings (cosine 0.98 > 0.95), and one new fact (cosine 0.6).
        second = write_facts(
            backend,
            [
                ("preference", "screen-colours", "night colours"),
                ("style", "answer-length", "brief answers"),
                ("preference", "drink", "tea"),
            ],
            message="m2",
            at=later,
        )
        assert (second.extracted, second.merged, second.reinforced) == (1, 2, 1)
        facts = active(backend)
        assert sorted(facts) == [(USER, "drink"), (USER, "editor-theme"), (USER, "tone")]
        theme, tone = facts[(USER, "editor-theme")], facts[(USER, "tone")]
        # The survivor keeps its words and its vector, and records the batch that repeated it.
        assert (theme.object, theme.updated_at, theme.message_ids) == ("dark mode", later, ["m1", "m2"])
        assert theme.embedding == KeywordEmbedder.VECTORS["dark"] and theme.embedding_model == "keywords-v1"
        assert (tone.object, tone.reinforced_count) == ("terse replies", 2)
        # The same batch again (a retry) changes nothing.
        before = dump(backend)
        third = write_facts(
            backend,
            [("preference", "screen-colours", "night colours"), ("style", "answer-length", "brief answers")],
            message="m2",
            at=later + timedelta(hours=1),
        )
        assert (third.extracted, third.reinforced) == (0, 0)
        assert dump(backend) == before


def test_a_change_of_mind_within_one_answer_keeps_the_later_value_and_a_retry_changes_nothing(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    # Found by bench/extraction.py: the first value was written from this batch's message, so the
    # second was taken for an earlier attempt's and dropped; the later statement is the one to keep.
    with open_backend("one") as backend:
        answer: list[tuple[FactCategory, str, str]] = [
            ("preference", "favourite-language", "Python"),
            ("preference", "favourite-language", "Rust"),
            ("preference", "favourite-language", "Rust"),
        ]
        outcome = write_facts(backend, answer, message="m1", at=RUN_AT)
        assert (outcome.extracted, outcome.merged, len(outcome.written)) == (1, 2, 1)
        assert active(backend)[(USER, "favourite-language")].object == "Rust"
        before = dump(backend)
        retry = write_facts(backend, answer, message="m1", at=RUN_AT + timedelta(hours=1))
        assert retry.written == [] and dump(backend) == before


def test_a_value_under_a_credential_key_is_never_stored(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    # Redaction finds "password: x" in running text; an item splits the key from the value.
    with open_backend("one") as backend:
        outcome = write_facts(
            backend,
            [
                ("entity", "db-password", "Tr0ub4dor&3"),
                ("entity", "github-token", "abc123def"),
                ("entity", "openai-api-key", "k-123"),
                ("preference", "pinned-tabs", "always"),
            ],
            message="m1",
            at=RUN_AT,
        )
        assert (outcome.dropped, outcome.extracted) == (3, 1)
        assert sorted(active(backend)) == [(USER, "pinned-tabs")]


def test_vectors_of_another_embedding_model_are_not_compared(
    open_backend: Callable[[str], contextlib.AbstractContextManager[Backend]],
) -> None:
    with open_backend("one") as backend:
        backend.embedder = KeywordEmbedder("keywords-v1")
        write_facts(backend, [("preference", "editor-theme", "dark mode")], message="m1", at=RUN_AT)
        backend.embedder = KeywordEmbedder("keywords-v2")
        outcome = write_facts(
            backend, [("preference", "screen-colours", "night colours")], message="m2", at=RUN_AT
        )
        assert (outcome.extracted, outcome.merged) == (1, 0)
        assert sorted(active(backend)) == [(USER, "editor-theme"), (USER, "screen-colours")]
