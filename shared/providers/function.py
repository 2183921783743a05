"""A model backed by a Python function, for tests and benchmarks (pydantic-ai's FunctionModel).

The function sees the whole ChatRequest and answers with either the reply text or the events a
real provider would stream, so a test can script tool calls, refusals and usage exactly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from shared.models import AssistantMessage, ToolResultMessage, UserMessage
from shared.providers.base import ChatRequest, Done, ProviderEvent, TextDelta, ToolCallEvent, Usage

ModelFunction = Callable[[ChatRequest], str | Iterable[ProviderEvent]]


class FunctionProvider:
    name = "function"

    def __init__(self, fn: ModelFunction) -> None:
        self.fn = fn
        self.requests: list[ChatRequest] = []  # every request seen, for assertions

    def stream(self, request: ChatRequest) -> Iterator[ProviderEvent]:
        self.requests.append(request)
        answer = self.fn(request)
        if isinstance(answer, str):
            if answer:
                yield TextDelta(text=answer)
            yield Usage(input_tokens=estimate_tokens(request), output_tokens=_words(answer))
            yield Done(finish_reason="stop")
            return
        called_tools = False
        for event in answer:
            yield event
            if isinstance(event, Done):
                return  # the contract ends at Done, whatever the function yields after it
            called_tools = called_tools or isinstance(event, ToolCallEvent)
        # Functions may leave the Done out; the contract still promises one.
        yield Done(finish_reason="tool_calls" if called_tools else "stop")


def estimate_tokens(request: ChatRequest) -> int:
    """A word count standing in for input tokens: stable, cheap, and roughly proportional."""
    total = _words(request.system)
    for m in request.messages:
        if isinstance(m, UserMessage | ToolResultMessage):
            total += _words(m.content)
        elif isinstance(m, AssistantMessage):
            total += _words(m.content) + sum(_words(c.arguments) for c in m.tool_calls)
    return total


def _words(text: str) -> int:
    return len(text.split())
