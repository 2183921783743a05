"""FunctionProvider: the function-backed model that tests and benchmarks drive the turn with."""

from __future__ import annotations

from collections.abc import Iterator

from shared.models import AssistantMessage, ToolCall, UserMessage
from shared.providers.base import (
    ChatRequest,
    Done,
    Provider,
    ProviderEvent,
    TextDelta,
    ToolCallEvent,
    Usage,
)
from shared.providers.function import FunctionProvider, estimate_tokens


def req(text: str = "hello there") -> ChatRequest:
    return ChatRequest(model="test", system="be brief", messages=[UserMessage(content=text)])


def test_it_is_a_provider_named_function() -> None:
    provider = FunctionProvider(lambda r: "hi")
    assert isinstance(provider, Provider)
    assert provider.name == "function"


def test_a_string_answer_streams_text_usage_then_done() -> None:
    # Given a function that answers with text, when streamed
    events = list(FunctionProvider(lambda r: "two words").stream(req("hello there")))
    # Then it looks like a real provider's stream, with usage estimated from word counts
    assert events == [
        TextDelta(text="two words"),
        Usage(input_tokens=4, output_tokens=2),  # "be brief" + "hello there"
        Done(finish_reason="stop"),
    ]


def test_an_empty_string_answer_has_no_text_delta() -> None:
    events = list(FunctionProvider(lambda r: "").stream(req()))
    assert [type(e) for e in events] == [Usage, Done]


def test_the_function_sees_the_request_and_requests_are_recorded() -> None:
    def echo(request: ChatRequest) -> str:
        last = request.messages[-1]
        assert isinstance(last, UserMessage)
        return last.content.upper()

    provider = FunctionProvider(echo)
    events = list(provider.stream(req("shout")))
    assert events[0] == TextDelta(text="SHOUT")
    assert [r.messages[-1].content for r in provider.requests] == ["shout"]


def test_a_list_of_events_without_done_gets_one_matching_its_content() -> None:
    call = ToolCall(id="c1", name="lookup", arguments='{"q":"x"}')
    events = list(FunctionProvider(lambda r: [ToolCallEvent(call=call)]).stream(req()))
    assert events == [ToolCallEvent(call=call), Done(finish_reason="tool_calls")]

    events = list(FunctionProvider(lambda r: [TextDelta(text="a"), TextDelta(text="b")]).stream(req()))
    assert events[-1] == Done(finish_reason="stop")


def test_an_iterator_is_streamed_and_stops_at_its_done() -> None:
    def gen(request: ChatRequest) -> Iterator[ProviderEvent]:
        yield TextDelta(text="no")
        yield Done(finish_reason="refusal", refusal="no")
        yield TextDelta(text="after the end")

    events = list(FunctionProvider(gen).stream(req()))
    assert events == [TextDelta(text="no"), Done(finish_reason="refusal", refusal="no")]


def test_estimate_counts_words_of_every_message_kind() -> None:
    call = ToolCall(id="c", name="f", arguments='{"a": 1}')
    request = ChatRequest(
        model="m",
        system="one two",
        messages=[UserMessage(content="three"), AssistantMessage(content="four five", tool_calls=[call])],
    )
    assert estimate_tokens(request) == 2 + 1 + 2 + 2
