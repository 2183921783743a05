"""The active window's cut (shared.agent.window.split_window): it always opens on a user message.

Anthropic and Bedrock reject a conversation that does not start with the user, and a window cut
inside a turn would hold tool results whose calls rolled out. The conversations generated here
are shaped as the turn stores them: each turn is the user's message, then steps of an assistant
message with its tool calls followed by one result per call, then the reply; a turn that ended
before the model (no model configured, a budget used up, the apology after a failure) is the
user's message alone, so several user messages may follow one another.
"""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from shared.agent.window import split_window
from shared.models import AssistantMessage, Message, ToolCall, ToolResultMessage, UserMessage


def user(text: str = "hi") -> UserMessage:
    return UserMessage(content=text)


def reply(text: str = "ok") -> AssistantMessage:
    return AssistantMessage(content=text)


def step(turn: int, n: int, calls: int = 1) -> list[Message]:
    """One assistant message asking for `calls` tools, and their results."""
    ids = [f"t{turn}.s{n}.c{i}" for i in range(calls)]
    asked = AssistantMessage(content="let me look", tool_calls=[ToolCall(id=i, name="f") for i in ids])
    return [asked, *(ToolResultMessage(tool_call_id=i, name="f", content="r") for i in ids)]


def turn(number: int, steps: Sequence[int] = (), *, answered: bool = True) -> list[Message]:
    """A stored turn: the user's message, a step per entry of `steps` (its call count), the reply."""
    found: list[Message] = [user(f"u{number}")]
    for n, calls in enumerate(steps):
        found += step(number, n, calls)
    return [*found, reply(f"a{number}")] if answered else found


@st.composite
def conversations(draw: st.DrawFn) -> list[Message]:
    messages: list[Message] = []
    for number in range(draw(st.integers(1, 8))):
        answered = draw(st.booleans()) or draw(st.booleans())  # mostly answered
        steps = draw(st.lists(st.integers(1, 3), max_size=6)) if answered else []
        messages += turn(number, steps, answered=answered)
    return messages


def assert_well_cut(messages: list[Message], size: int) -> None:
    rolled, kept = split_window(messages, size)
    # A split of the input: rolled is a prefix, kept the rest
    assert rolled + kept == messages
    # Never empty, opening on a user message, and holding the newest one (the turn being answered)
    assert kept and isinstance(kept[0], UserMessage)
    last_user = max(i for i, m in enumerate(messages) if isinstance(m, UserMessage))
    assert len(rolled) <= last_user
    # No tool result is separated from the assistant message that asked for it, either way
    asked = {c.id for m in kept if isinstance(m, AssistantMessage) for c in m.tool_calls}
    answered = {m.tool_call_id for m in kept if isinstance(m, ToolResultMessage)}
    assert asked == answered
    # As many of the newest `size` messages as a user-opened window can hold: the cut is the first
    # user message at or after the nominal one, or, when none follows it, the last user message
    nominal = max(0, len(messages) - size)
    following = [i for i, m in enumerate(messages) if isinstance(m, UserMessage) and i >= nominal]
    assert len(rolled) == (following[0] if following else last_user)
    if following:
        assert len(kept) <= size


@given(conversations(), st.integers(2, 60))
def test_the_window_opens_on_a_user_message_and_keeps_whole_turns(messages: list[Message], size: int) -> None:
    assert_well_cut(messages, size)


@given(
    st.lists(
        st.sampled_from(["user", "assistant", "call", "tool"]).map(
            lambda kind: {
                "user": user(),
                "assistant": reply(),
                "call": AssistantMessage(tool_calls=[ToolCall(id="c", name="f")]),
                "tool": ToolResultMessage(tool_call_id="c", name="f", content="r"),
            }[kind]
        ),
        max_size=30,
    ),
    st.integers(2, 40),
)
def test_any_list_splits_into_a_prefix_and_a_user_opened_suffix(messages: list[Message], size: int) -> None:
    # Whatever a stored window holds (one cut by an older rule may open on anything)
    rolled, kept = split_window(messages, size)
    assert rolled + kept == messages
    if any(isinstance(m, UserMessage) for m in messages):
        assert kept and isinstance(kept[0], UserMessage)
    else:
        # Nothing can open the window: it all rolls out, and the next turn's message opens it
        assert kept == []


def test_a_window_of_two_keeps_the_last_exchange() -> None:
    history = [*turn(0), *turn(1)]
    assert split_window(history, 2) == (history[:2], history[2:])


def test_a_window_of_two_keeps_a_whole_tool_turn_rather_than_cut_it() -> None:
    # The nominal window would be [the tool result, the reply]: no user message opens it
    history = [*turn(0), *turn(1, [1])]
    rolled, kept = split_window(history, 2)
    assert rolled == history[:2]
    assert [m.kind for m in kept] == ["user", "assistant", "tool", "assistant"]


def test_a_turn_of_25_tool_messages_stays_whole_in_a_window_of_20() -> None:
    # Given earlier turns and then one of 25 messages after the user's (12 steps of a call and its
    # result, then the reply), longer on its own than the window
    chain = turn(9, [1] * 12)
    assert len(chain) == 1 + 25
    history = [*turn(0), *turn(1, [2]), *chain]
    rolled, kept = split_window(history, 20)
    # Then the window is that turn, whole, from its user message: the turn being answered is
    # never cut, and the earlier turns roll out
    assert kept == chain and rolled == history[: -len(chain)]
    assert_well_cut(history, 20)


def test_consecutive_user_messages_may_be_split_but_the_newest_stays() -> None:
    # Two turns that ended before the model (the user's message alone), then an answered one
    lone_a, lone_b = user("are you there?"), user("hello?")
    answered = turn(2, [1])
    history = [*turn(0), lone_a, lone_b, *answered]
    # A window of 4 opens at the answered turn's message; of 5 at the second lone message; of 6
    # at the first: each a user message, the extra ones kept when the size allows
    assert split_window(history, 4)[1] == answered
    assert split_window(history, 5)[1] == [lone_b, *answered]
    assert split_window(history, 6)[1] == [lone_a, lone_b, *answered]
    # And a window smaller than the answered turn keeps that turn, never a lone message alone
    assert split_window(history, 2)[1] == answered
    # The newest message being a lone user message (this turn's, before any reply), it stays
    assert split_window([*history, user("now?")], 2)[1][-1].content == "now?"


def test_the_window_holding_everything_is_not_cut() -> None:
    history = [*turn(0, [2]), *turn(1)]
    assert split_window(history, 50) == ([], history)
