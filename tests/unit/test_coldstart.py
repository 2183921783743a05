"""shared.coldstart: the collector paused over a handler's imports and given back as it was, the
imports' objects frozen, pydantic's plugin search off unless the operator set it."""

from __future__ import annotations

import gc
import os
import threading
from collections.abc import Iterator

import pytest

from shared.coldstart import cold_imports, gc_paused


@pytest.fixture(autouse=True)
def collector() -> Iterator[None]:
    """Each test starts with the collector on and leaves it as the runner had it."""
    was = gc.isenabled()
    gc.enable()
    yield
    if was:
        gc.enable()
    else:
        gc.disable()


def test_the_collector_is_off_inside_and_back_on_after() -> None:
    with gc_paused():
        inside = gc.isenabled()

    assert (inside, gc.isenabled()) == (False, True)


def test_the_collector_comes_back_after_an_error_in_the_block() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        raise RuntimeError("an import failed")

    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off() -> None:
    gc.disable()

    with gc_paused():
        pass

    assert not gc.isenabled()


def test_overlapping_pauses_in_threads_give_it_back_when_the_last_one_ends() -> None:
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    seen: dict[str, bool] = {}

    def first() -> None:
        with gc_paused():
            first_in.set()
            second_in.wait(10)
        seen["after the first"] = gc.isenabled()
        first_out.set()

    def second() -> None:
        first_in.wait(10)
        with gc_paused():
            second_in.set()
            first_out.wait(10)
            seen["inside the second, the first over"] = gc.isenabled()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)

    assert seen == {"after the first": False, "inside the second, the first over": False}
    assert gc.isenabled()


def test_freeze_moves_what_exists_to_the_permanent_generation() -> None:
    before = gc.get_freeze_count()
    kept: list[list[int]] = [[] for _ in range(1000)]  # container objects the collector tracks

    with gc_paused(freeze=True):
        pass

    assert gc.get_freeze_count() >= before + len(kept)
    gc.unfreeze()  # give the test process its generations back


def test_cold_imports_turns_the_plugin_search_off_unless_it_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    with cold_imports():
        assert not gc.isenabled()
    gc.unfreeze()
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"

    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "")  # an operator who wants their plugins
    with cold_imports():
        pass
    gc.unfreeze()
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == ""
