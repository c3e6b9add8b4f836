"""A pytest plugin that measures, per test, the XLA compiling and the compile-cache lookups of its own process.

Not loaded by default: `JAXINTRO_COMPILE_EVENTS=events.jsonl PYTHONPATH=tests .venv/bin/python -m pytest -p compile_events`
appends one JSON line per test: its id, wall seconds, seconds in JAX's backend compile (a cache hit's lookup
included), and the persistent cache's hits and misses (how a cache every test missed was found: git log -S compile_events).
"""

from __future__ import annotations

import collections
import json
import os
import time
from typing import Iterator

import pytest

_counts: collections.Counter = collections.Counter()
_listening = False


def _on_event(event: str, **_kwargs) -> None:
    if event.startswith("/jax/compilation_cache/cache_"):  # cache_hits, cache_misses
        _counts[event.rsplit("/", 1)[1]] += 1


def _on_duration(event: str, duration: float, **_kwargs) -> None:
    if event == "/jax/core/compile/backend_compile_duration":
        _counts["compile_seconds"] += duration


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Count the events between this test's start and end, and append them to the file."""
    global _listening
    import jax.monitoring

    if not _listening:
        jax.monitoring.register_event_listener(_on_event)
        jax.monitoring.register_event_duration_secs_listener(_on_duration)
        _listening = True
    _counts.clear()
    start = time.perf_counter()
    yield
    row = {"test": item.nodeid, "wall_seconds": time.perf_counter() - start,
           "compile_seconds": _counts["compile_seconds"], "hits": _counts["cache_hits"],
           "misses": _counts["cache_misses"]}
    with open(os.environ.get("JAXINTRO_COMPILE_EVENTS", "compile-events.jsonl"), "a") as out:
        out.write(json.dumps(row) + "\n")
