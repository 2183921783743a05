"""media_inputs on every adapter set (embedded: files and SQLite FTS; cloud: S3 and OpenSearch on
moto/osmem): a document's extracted text is redacted before anything stores it, indexed under the
sender's scope (another user's recall does not reach it), and kept on the MediaItem so a retry
reads it back; a voice note's transcript is stored on the item and never made twice."""

from __future__ import annotations

from shared.budgets import TurnBudget
from shared.media.content import VOICE_PREFIX, MediaDeps, MediaInputs, media_inputs, stored_items
from shared.memory.doc_keys import document_doc_id
from shared.memory.scope import owner_scope
from shared.memory.writer import MemoryWriter
from shared.models import Attachment, IndexQuery, RecallScope, UserMessage, WorkspaceConfig
from shared.models.media import Transcript
from tests.support.media_files import pdf, stored

from .factories import ContractBackend

SECRET = "AKIAIOSFODNN7EXAMPLE"  # AWS's documented example key id: the redaction filter's rule


def _guard(text: str, *, source: str, quote_all: bool = False) -> str:
    return f"<<{source}>>{text}<</{source}>>" if quote_all else text


class CountingTranscriber:
    """A Transcriber that counts its calls (the port's contract; the OpenAI adapter is tested
    through the real SDK in tests/integration/test_media_model.py)."""

    model_ref = "openai/whisper-1"

    def __init__(self) -> None:
        self.calls = 0

    def transcribe(self, audio: bytes, *, mime_type: str, filename: str) -> Transcript:
        self.calls += 1
        return Transcript(text=f"call me back about {len(audio)} bytes", seconds=30.0, model=self.model_ref)


def _inputs(
    deps: MediaDeps,
    workspace: WorkspaceConfig,
    attached: Attachment,
    user: UserMessage,
    *,
    budget: TurnBudget | None = None,
) -> MediaInputs:
    """media_inputs for Ada's web session s1, with the file she attached as the turn's one item."""
    assert deps.store is not None
    return media_inputs(
        deps,
        workspace,
        stored_items(deps.store, workspace.id, [attached]),
        user,
        model_ref="openai/gpt-4.1-mini",
        user_id="u-ada",
        scope=owner_scope("web.s1", ["u-ada"], group=False),
        guard=_guard,
        budget=budget,
    )


def test_a_documents_text_is_redacted_indexed_under_the_senders_scope_and_kept(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    assert backend.media is not None
    workspace = WorkspaceConfig(id=ws_a)
    document = pdf(["Invoice for the greenhouse.", f"Deploy key {SECRET} for the orchid sensors."])
    attached = stored(
        backend.media, ws_a, document, kind="document", mime_type="application/pdf", name="inv.pdf"
    )
    deps = MediaDeps(store=backend.media, writer=MemoryWriter(backend.index, backend.embedder))
    user = UserMessage(id="t1.u", content="file this")

    out = _inputs(deps, workspace, attached, user)

    # The request quotes the text as a document; the stored message names it only
    assert "<<document inv.pdf>>" in out.shown.content and "orchid sensors" in out.shown.content
    assert "orchid" not in out.user.content and "inv.pdf" in out.user.content
    # Redacted before anything stored it: the item, the index, the request
    item = backend.media.get(ws_a, attached.media_id or "")
    assert item is not None and item.text_source == "extracted" and item.text is not None
    assert "orchid sensors" in item.text and SECRET not in item.text and SECRET not in out.shown.content
    # Found by the sender's recall, not by another user's
    mine = RecallScope(session_id="web.other", users=("u-ada",), shared=True)
    theirs = RecallScope(session_id="web.other", users=("u-bob",), shared=True)

    def query(scope: RecallScope) -> IndexQuery:
        return IndexQuery(text="orchid sensors", k=5, tiers=["message"], scope=scope)

    hits = backend.index.search(ws_a, query(mine)).text_hits
    assert document_doc_id(attached.media_id or "") in {h.doc.id for h in hits}
    assert SECRET not in " ".join(h.doc.text for h in hits)
    assert backend.index.search(ws_a, query(theirs)).text_hits == []
    # A retry reads the kept text (nothing to extract again) and shows the same
    again = _inputs(deps, workspace, attached, user)
    assert again.shown.content == out.shown.content


def test_a_voice_note_is_transcribed_once_and_charged_by_the_minute(
    contract: ContractBackend, ws_a: str
) -> None:
    backend = contract.backend
    assert backend.media is not None
    workspace = WorkspaceConfig(id=ws_a)
    attached = stored(
        backend.media, ws_a, b"OggS" + b"\x01" * 99, kind="audio", mime_type="audio/ogg", name="v.ogg"
    )
    speech = CountingTranscriber()
    deps = MediaDeps(store=backend.media, transcriber=speech)
    budget = TurnBudget(backend.budgets, ws_a, "u-ada", None)
    user = UserMessage(id="t1.u", content="")

    first = _inputs(deps, workspace, attached, user, budget=budget)
    second = _inputs(deps, workspace, attached, user, budget=budget)

    assert speech.calls == 1
    assert first.user.content == second.user.content == f"{VOICE_PREFIX} call me back about 103 bytes"
    assert first.audio_seconds == 30.0 and second.audio_seconds == 0.0
    # Half a minute of whisper-1 at $0.006 a minute
    assert budget.spent.usd_nanos == 3_000_000
    item = backend.media.get(ws_a, attached.media_id or "")
    assert item is not None and item.text_source == "transcript"


def test_erasing_the_sender_removes_their_documents_text_from_the_index(
    contract: ContractBackend, ws_a: str
) -> None:
    from shared.memory.erasure import erase_user

    backend = contract.backend
    assert backend.media is not None
    # A document long enough to be indexed as several chunks
    pages = [f"Page {i}: the orchid greenhouse humidity log reads {i * 7} percent. " * 8 for i in range(12)]
    attached = stored(
        backend.media, ws_a, pdf(pages), kind="document", mime_type="application/pdf", name="log.pdf"
    )
    deps = MediaDeps(store=backend.media, writer=MemoryWriter(backend.index, backend.embedder))
    _inputs(deps, WorkspaceConfig(id=ws_a), attached, UserMessage(id="t1.u", content=""))
    everyone = RecallScope(workspace_wide=True)
    query = IndexQuery(text="orchid greenhouse humidity", k=50, tiers=["message"], scope=everyone)
    assert len(backend.index.search(ws_a, query).text_hits) > 1

    report = erase_user(backend, ws_a, "u-ada")

    assert report.index_docs_deleted > 1
    assert backend.index.search(ws_a, query).text_hits == []
