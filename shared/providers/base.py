"""The provider contract: one small interface that streams typed events.

A provider turns a ChatRequest into a stream of events: text deltas, complete tool calls, usage,
and one final Done. The agent loop only ever sees these events, never an SDK's types.
"""

# Annotations are not postponed here: pydantic makes this module's models at import, and would
# evaluate each field's annotation from its text (shared/models/__init__.py).

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Annotated, Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from shared.models import ImageRef, Message, ToolCall, UserMessage


class ToolSpec(BaseModel):
    """A tool as the model sees it: name, description and a JSON schema of its arguments."""

    name: str
    description: str
    parameters: dict[str, Any]


class ImageData(BaseModel):
    """A photo's bytes for one request (shared.media.content reads them from the MediaStore)."""

    model_config = ConfigDict(defer_build=True)  # built when first used, not at import

    mime_type: str
    data: bytes


class ChatRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model: str  # the provider's own model name, e.g. "gpt-4.1-mini"
    system: str
    messages: list[Message]
    # How many characters of `system` are its static prefix (docs/context.md, "Prompt caching"):
    # byte-identical from turn to turn (instructions, the skill catalogue, the tool list, the
    # safety note), which each provider caches; the rest is what changes (the time, facts, the
    # summary), after it so that it never breaks the cache. 0: nothing to cache.
    cache_prefix: int = Field(default=0, ge=0)
    # Groups requests that share a prefix, for a provider that routes on it (OpenAI's
    # prompt_cache_key): a digest, never an id or text of the conversation.
    cache_key: str | None = None
    tools: list[ToolSpec] = Field(default_factory=list)
    max_tokens: int | None = None
    temperature: float | None = None
    # The bytes of the photos this request shows, by media id (UserMessage.images): resolved for
    # the call, never stored. A photo of the window whose bytes are not here is shown as a note.
    images: dict[str, ImageData] = Field(default_factory=dict)


class TextDelta(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ToolCallEvent(BaseModel):
    type: Literal["tool_call"] = "tool_call"
    call: ToolCall


class Usage(BaseModel):
    """Token counts of a call. `input_tokens` is the whole prompt; `cache_read_tokens` and
    `cache_write_tokens` are the parts of it the provider read from its prompt cache and wrote to
    it (priced apart: shared.budgets.ModelPrice), 0 where the provider says nothing."""

    type: Literal["usage"] = "usage"
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
        )


# The finish reasons of a model that declined to answer, however its provider says so: Anthropic's
# stop_reason "refusal" and an OpenAI message's `refusal` field come as "refusal"; OpenAI's
# finish_reason "content_filter" and Bedrock's "content_filtered" and "guardrail_intervened" come
# as "content_filter" (each provider maps its own words onto these).
REFUSALS = frozenset({"refusal", "content_filter"})


class Done(BaseModel):
    type: Literal["done"] = "done"
    finish_reason: str = "stop"  # stop | tool_calls | length | refusal | content_filter
    refusal: str | None = None  # the model's explanation, when it gave one

    @property
    def refused(self) -> bool:
        """The model, or the provider's filter in front of it, declined to answer: the turn is
        audited as "refused" rather than "ok", whichever provider said so."""
        return self.finish_reason in REFUSALS


def system_parts(request: ChatRequest) -> tuple[str, str]:
    """The system prompt as (static prefix, the rest), for a provider that marks where its cache
    ends; ("", system) when the request caches nothing."""
    cut = min(request.cache_prefix, len(request.system))
    return request.system[:cut].rstrip("\n"), request.system[cut:].lstrip("\n")


ProviderEvent = Annotated[TextDelta | ToolCallEvent | Usage | Done, Field(discriminator="type")]


@runtime_checkable
class Provider(Protocol):
    name: str

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        """Yield events for one model call; the last event is always a Done."""
        ...


def alternating_turns(
    messages: Iterable[Message], turn: Callable[[Message], tuple[str, list[dict[str, Any]]]]
) -> list[dict[str, Any]]:
    """Our messages as role turns of content blocks (`turn` maps one message to its role and
    blocks), with consecutive turns of one role merged: the Anthropic and Bedrock APIs want user
    and assistant to alternate, and a step's tool results must share one user turn."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role, blocks = turn(m)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    return out


def photo_note(ref: ImageRef) -> str:
    """What stands in for a photo the request does not show (one from an earlier turn)."""
    named = f" ({ref.name})" if ref.name else ""
    return f"[The user sent a photo earlier{named}; it is not shown again.]"


def user_parts(m: UserMessage, images: Mapping[str, ImageData]) -> list[str | ImageData]:
    """A user message as its photos (first: what follows is about them), then its text; a photo
    whose bytes the request does not carry becomes a note. Empty text is left out (Anthropic and
    Converse refuse an empty text block), unless there is nothing else."""
    parts: list[str | ImageData] = []
    for ref in m.images:
        image = images.get(ref.media_id)
        parts.append(image if image is not None else photo_note(ref))
    if m.content or not parts:
        parts.append(m.content)
    return parts
