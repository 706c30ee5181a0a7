"""osqueue.runtime: the event loop, GC and open-files settings of osqueue's own processes."""

from __future__ import annotations

import asyncio
import gc
import logging
import resource
from collections.abc import Callable, Iterator

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


class Rlimits:
    """RLIMIT_NOFILE as a test sets it: ``refuse`` lists the soft limits setrlimit rejects."""

    def __init__(self, soft: int, hard: int, refuse: tuple[int, ...] = ()) -> None:
        self.soft, self.hard, self.refuse = soft, hard, refuse
        self.asked: list[int] = []

    def get(self, which: int) -> tuple[int, int]:
        assert which == resource.RLIMIT_NOFILE
        return self.soft, self.hard

    def set(self, which: int, limits: tuple[int, int]) -> None:
        assert which == resource.RLIMIT_NOFILE
        self.asked.append(limits[0])
        if limits[0] in self.refuse:
            raise ValueError("not allowed")
        self.soft, self.hard = limits


@pytest.fixture
def rlimits(monkeypatch: pytest.MonkeyPatch) -> Callable[..., Rlimits]:
    def install(soft: int, hard: int, refuse: tuple[int, ...] = ()) -> Rlimits:
        fake = Rlimits(soft, hard, refuse)
        monkeypatch.setattr(resource, "getrlimit", fake.get)
        monkeypatch.setattr(resource, "setrlimit", fake.set)
        return fake

    return install


def test_the_soft_open_files_limit_is_raised_to_the_hard_one_and_logged(
    rlimits: Callable[..., Rlimits], caplog: pytest.LogCaptureFixture
) -> None:
    fake = rlimits(1024, 524_288)
    with caplog.at_level(logging.INFO, logger="osqueue.runtime"):
        assert runtime.raise_open_files_limit() == 524_288
    assert (fake.soft, fake.hard) == (524_288, 524_288)
    assert "raised from 1024 to 524288" in caplog.text


def test_a_refused_raise_leaves_the_limit_and_says_so(
    rlimits: Callable[..., Rlimits], caplog: pytest.LogCaptureFixture
) -> None:
    fake = rlimits(1024, 4096, refuse=(4096,))
    assert runtime.raise_open_files_limit() == 1024
    assert fake.soft == 1024
    assert "stays at 1024" in caplog.text


def test_an_unlimited_hard_limit_takes_the_first_value_the_kernel_accepts(
    rlimits: Callable[..., Rlimits],
) -> None:
    fake = rlimits(256, resource.RLIM_INFINITY, refuse=(1_048_576,))
    assert runtime.raise_open_files_limit() == 10_240
    assert fake.asked == [1_048_576, 10_240]


@pytest.mark.parametrize(("soft", "hard"), [(4096, 4096), (2_000_000, resource.RLIM_INFINITY)])
def test_a_limit_as_high_as_it_goes_is_never_lowered(
    rlimits: Callable[..., Rlimits], soft: int, hard: int
) -> None:
    fake = rlimits(soft, hard)
    assert runtime.raise_open_files_limit() == soft
    assert fake.asked == []


@pytest.mark.parametrize(
    ("limit", "wanted", "reserve", "cap"),
    [
        (None, 10_000, 256, 10_000),  # no limit to speak of
        (20_000, 10_000, 256, 10_000),  # room for all of them
        (1024, 10_000, 256, 768),  # the limit less the reserve
        (512, 256, 256, 256),
        (256, 10_000, 256, 64),  # no room beside the reserve: a quarter of the limit
        (256, 16, 256, 16),
    ],
)
def test_a_listener_gets_what_the_limit_leaves_beside_the_reserve(
    monkeypatch: pytest.MonkeyPatch, limit: int | None, wanted: int, reserve: int, cap: int
) -> None:
    monkeypatch.setattr(runtime, "open_files_limit", lambda: limit)
    assert runtime.connection_cap(wanted, reserve, listener="test") == cap
