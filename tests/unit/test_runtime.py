"""osqueue.runtime: the event loop and GC settings of osqueue's own processes."""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Iterator

import pytest

from osqueue import runtime
from osqueue.errors import InvalidInput


async def _loop_module() -> str:
    return type(asyncio.get_running_loop()).__module__


@pytest.mark.parametrize(
    ("choice", "expected"), [("auto", "uvloop"), ("uvloop", "uvloop"), ("asyncio", "asyncio")]
)
def test_run_uses_the_loop_the_variable_names(
    monkeypatch: pytest.MonkeyPatch, choice: str, expected: str
) -> None:
    monkeypatch.setenv(runtime.EVENT_LOOP_VARIABLE, choice)
    assert runtime.loop_name() == expected
    assert runtime.run(_loop_module()).split(".")[0] == expected


def test_a_bad_loop_name_is_refused_naming_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(runtime.EVENT_LOOP_VARIABLE, "trio")
    with pytest.raises(InvalidInput) as caught:
        runtime.run(_loop_module())
    assert caught.value.field == runtime.EVENT_LOOP_VARIABLE
    assert "trio" in str(caught.value)


@pytest.fixture
def restored_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


@pytest.mark.usefixtures("restored_gc")
def test_tune_gc_raises_the_thresholds_and_freezes_start_up_objects() -> None:
    runtime.tune_gc()
    assert gc.get_threshold() == runtime.GC_THRESHOLDS
    assert gc.get_freeze_count() > 0
