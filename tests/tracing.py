"""The OpenTelemetry SDK for the tracing tests: one global tracer provider per process (the API
takes one), its spans kept by an InMemorySpanExporter only while a test collects them, so that
the tests that run after them in the process keep nothing."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter


class _Collecting(SimpleSpanProcessor):
    """Hands ended spans to the exporter only while ``on``."""

    on = False

    def on_end(self, span: ReadableSpan) -> None:
        if self.on:
            super().on_end(span)


EXPORTER = InMemorySpanExporter()
_PROCESSOR = _Collecting(EXPORTER)
_PROVIDER: TracerProvider | None = None


def collecting() -> Iterator[InMemorySpanExporter]:
    """(A fixture's body.) The exporter, empty, collecting until the test ends."""
    global _PROVIDER
    if _PROVIDER is None:
        _PROVIDER = TracerProvider()
        _PROVIDER.add_span_processor(_PROCESSOR)
        trace.set_tracer_provider(_PROVIDER)
    EXPORTER.clear()
    _PROCESSOR.on = True
    try:
        yield EXPORTER
    finally:
        _PROCESSOR.on = False
        EXPORTER.clear()


def named(spans: Sequence[ReadableSpan], name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.name == name]


def one(spans: Sequence[ReadableSpan], name: str) -> ReadableSpan:
    found = named(spans, name)
    assert len(found) == 1, (name, [s.name for s in spans])
    return found[0]
