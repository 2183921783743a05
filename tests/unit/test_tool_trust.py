"""Which tools declare third-party output (Tool.untrusted_output): the turn quotes their results
as untrusted data always (docs/safety.md), so the declaration is what decides, per tool."""

from __future__ import annotations

from pydantic import BaseModel

from shared.tools import ToolContext, tool
from shared.tools.builtin import BUILTIN_TOOLS, agent_registry, default_registry
from shared.tools.memory import MEMORY_TOOLS


class PageArgs(BaseModel):
    url: str


def test_every_memory_tool_declares_third_party_output_and_no_builtin_does() -> None:
    # Memory holds what people wrote (messages, summaries of them, facts learnt from them)
    assert {t.name for t in MEMORY_TOOLS if t.untrusted_output} == {t.name for t in MEMORY_TOOLS}
    # The built-ins write their results themselves (the time, the session's ids, the pin)
    assert [t.name for t in BUILTIN_TOOLS if t.untrusted_output] == []


def test_the_registry_answers_for_its_tools_and_an_unknown_name_is_not_third_party() -> None:
    registry = agent_registry()
    assert registry.untrusted_output("memory_search")
    assert not registry.untrusted_output("current_time")
    assert not registry.untrusted_output("no_such_tool")  # its result is the registry's own error


def test_a_tool_declares_it_with_the_decorator_and_keeps_it_when_registered() -> None:
    @tool(untrusted_output=True)
    def fetch_page(args: PageArgs, ctx: ToolContext) -> str:
        """The text of a web page."""
        return ""

    @tool
    def echo_url(args: PageArgs, ctx: ToolContext) -> str:
        """The URL back."""
        return args.url

    assert fetch_page.untrusted_output and not echo_url.untrusted_output
    registry = default_registry().extended(fetch_page, echo_url)
    assert registry.untrusted_output("fetch_page") and not registry.untrusted_output("echo_url")
