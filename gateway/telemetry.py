"""OpenTelemetry for the edges and the engine: opt-in (``--otel``, ``CHIT_OTEL=1``), off by default.

The ``mcp`` SDK opens one SERVER span per request under the OpenTelemetry
semantic conventions for MCP; this module configures the SDK's providers from
the standard ``OTEL_*`` variables, adds chit's attributes to that span and
records ``mcp.server.operation.duration``. Nothing here imports the
OpenTelemetry SDK until :func:`enable` runs. Tool arguments, results and token
text are never exported. docs/telemetry.md.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from collections.abc import Callable, Mapping
from typing import Any

__all__ = [
    "ENGINE_DURATION", "ENV_FLAG", "disable", "enable", "enabled", "engine_call", "engine_offer",
    "install", "note_call", "trace_headers", "wanted",
]

logger = logging.getLogger("chit.gateway")

ENV_FLAG = "CHIT_OTEL"
"""The variable that turns telemetry on like ``--otel`` (``1``, ``true``, ``yes``, ``on``)."""
INSTRUMENTATION = "chit"
DURATION = "mcp.server.operation.duration"
ENGINE_DURATION = "chit.engine.operation.duration"
"""The engine's histogram: one ``offer`` or ``invoke`` as the engine served it."""
# The semantic conventions' advice for MCP operation durations, in seconds.
_BUCKETS = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)

_state: dict[str, Any] = {}  # "histogram" and "engine_histogram" once enabled


def wanted(flag: bool) -> bool:
    """Whether telemetry is asked for: ``--otel`` or ``$CHIT_OTEL`` set to a true value."""
    value = os.environ.get(ENV_FLAG, "").strip().lower()
    return flag or value in {"1", "true", "yes", "on"}


def enabled() -> bool:
    """Whether :func:`enable` ran in this process."""
    return "histogram" in _state


def enable(*, configure: bool = True) -> None:
    """Turn telemetry on for this process (idempotent).

    Args:
        configure: Configure the global tracer and meter providers from the
            ``OTEL_*`` environment variables with the OpenTelemetry SDK's own
            configurator (``OTEL_TRACES_EXPORTER``, ``OTEL_METRICS_EXPORTER``,
            ``OTEL_EXPORTER_OTLP_*``, ``OTEL_SERVICE_NAME``, ...; OTLP by
            default). ``False``: use the providers already installed (tests).

    Raises:
        ConfigurationError: The ``chit[otel]`` extra is not installed, or the
            ``OTEL_*`` variables name an exporter that is not installed.
    """
    if enabled():
        return
    from engine.errors import ConfigurationError

    try:
        from opentelemetry import metrics
    except ImportError:  # pragma: no cover - the api comes with mcp
        raise ConfigurationError("--otel needs the chit[otel] extra") from None
    if configure:
        os.environ[ENV_FLAG] = "1"  # the processes this one starts (engine workers) follow
        os.environ.setdefault("OTEL_SERVICE_NAME", "chit")
        os.environ.setdefault("OTEL_LOGS_EXPORTER", "none")  # chit exports no log records
        try:
            from opentelemetry.sdk._configuration import _OTelSDKConfigurator
            from opentelemetry.sdk.metrics.export import ConsoleMetricExporter
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter
        except ImportError:
            raise ConfigurationError(
                "--otel needs the chit[otel] extra (pip install 'chit[otel]')") from None
        # stdout is the stdio edge's MCP channel: the console exporters write to stderr.
        to_stderr = {"out": sys.stderr}
        try:
            _OTelSDKConfigurator().configure(exporter_args_map={
                ConsoleSpanExporter: to_stderr, ConsoleMetricExporter: to_stderr})
        except (ValueError, RuntimeError) as exc:  # an unknown exporter name
            raise ConfigurationError(f"--otel: the OTEL_* settings are unusable: {exc}") from None
    meter = metrics.get_meter(INSTRUMENTATION)
    _state["histogram"] = meter.create_histogram(
        DURATION, unit="s", description="Duration of MCP request processing on the server",
        explicit_bucket_boundaries_advisory=list(_BUCKETS),
    )
    _state["engine_histogram"] = meter.create_histogram(
        ENGINE_DURATION, unit="s", description="Duration of an engine's offer or invoke",
        explicit_bucket_boundaries_advisory=list(_BUCKETS),
    )
    logger.info("OpenTelemetry on: traces and metrics per the OTEL_* environment")


def disable() -> None:
    """Stop adding chit's telemetry to new servers and calls (the providers stay as they are)."""
    _state.clear()


class _Middleware:
    """Adds ``network.transport`` to the SDK's span and records the duration histogram."""

    def __init__(self, transport: str) -> None:
        self._transport = transport

    async def __call__(self, ctx: Any, call_next: Any) -> Any:
        from mcp.shared.exceptions import MCPError
        from opentelemetry import trace

        span = trace.get_current_span()
        span.set_attribute("network.transport", self._transport)
        _bound_client_text(span, ctx)
        attributes: dict[str, Any] = {
            "mcp.method.name": ctx.method,
            "network.transport": self._transport,
        }
        if ctx.protocol_version:
            attributes["mcp.protocol.version"] = ctx.protocol_version
        name = ctx.params.get("name") if isinstance(ctx.params, dict) else None
        if ctx.method == "tools/call" and isinstance(name, str):
            # A client names any tool it likes: bounded, as in the unknown-tool error
            # (and the SDK bounds how many attribute sets a histogram keeps).
            attributes["gen_ai.tool.name"] = name[:_CLIENT_TEXT]
            attributes["gen_ai.operation.name"] = "execute_tool"
        start = time.perf_counter()
        try:
            result = await call_next(ctx)
        except MCPError as exc:
            attributes["error.type"] = str(exc.error.code)
            raise
        except Exception as exc:
            attributes["error.type"] = type(exc).__qualname__
            raise
        else:
            # The handler's model, or the dict the SDK made of it (as the SDK's own span reads it).
            if getattr(result, "is_error", False) is True or (
                    isinstance(result, dict) and result.get("isError") is True):
                attributes["error.type"] = "tool_error"
            return result
        finally:
            _state["histogram"].record(time.perf_counter() - start, attributes)


_CLIENT_TEXT = 100  # characters of a name or id a client chose, in span names and attributes


def _bound_client_text(span: Any, ctx: Any) -> None:
    """Cut what the client chose (tool name, request id) in the SDK's span to 100 characters.

    The SDK names the span ``tools/call {name}`` and sets ``gen_ai.tool.name``
    and ``jsonrpc.request.id`` from the request as sent: a client could make
    them any length.
    """
    name = ctx.params.get("name") if isinstance(ctx.params, dict) else None
    if isinstance(name, str) and len(name) > _CLIENT_TEXT:
        span.update_name(f"{ctx.method} {name[:_CLIENT_TEXT]}")
        span.set_attribute(
            "gen_ai.prompt.name" if ctx.method == "prompts/get" else "gen_ai.tool.name",
            name[:_CLIENT_TEXT])
    request_id = getattr(ctx, "request_id", None)
    if request_id is not None and len(str(request_id)) > _CLIENT_TEXT:
        span.set_attribute("jsonrpc.request.id", str(request_id)[:_CLIENT_TEXT])


def install(server: Any, transport: str) -> None:
    """Add chit's telemetry to one low-level ``mcp`` server, if :func:`enable` ran.

    Args:
        server: The ``mcp.server.lowlevel.Server``.
        transport: ``network.transport``: ``"pipe"`` (stdio) or ``"tcp"`` (HTTP).
    """
    if enabled():
        server.middleware.append(_Middleware(transport))


def note_call(token: str, catalog_hash: str | None, answer: Any) -> None:
    """Put chit's attributes of one ``tools/call`` on the current span, if enabled.

    Args:
        token: The token text; only its unverified id and agent are read
            (``engine.admin.inspect_token``), never exported.
        catalog_hash: The catalog hash the connection listed, or ``None``.
        answer: The engine's :class:`~engine.service.Called` or
            :class:`~engine.service.Refused`.
    """
    if not enabled():
        return
    from opentelemetry import trace

    span = trace.get_current_span()
    if not span.is_recording():
        return
    code = getattr(answer, "code", None)
    attributes: dict[str, Any] = {"chit.decision": "refused" if code else "allowed"}
    if code:
        attributes["chit.code"] = str(code)
    if catalog_hash:
        attributes["chit.catalog_hash"] = catalog_hash
    attributes.update(_identity(token))
    span.set_attributes(attributes)


def _identity(token: str) -> dict[str, str]:
    """The token's id and agent as it claims them (unverified; empty if it does not parse)."""
    from engine import admin
    from engine.errors import ChitError

    try:
        info = admin.inspect_token(token)
    except (ChitError, ValueError):
        return {}
    out: dict[str, str] = {}
    if isinstance(info.get("id"), str):
        out["chit.token_id"] = info["id"]
    if isinstance(info.get("agent"), str):
        out["chit.agent"] = info["agent"]
    return out


def trace_headers() -> dict[str, str]:
    """W3C ``traceparent``/``tracestate`` of the current span, for a request to the engine.

    Returns:
        The headers to add; ``{}`` when telemetry is off or no span is current.
    """
    if not enabled():
        return {}
    from opentelemetry.propagate import inject

    carrier: dict[str, str] = {}
    inject(carrier)
    return carrier


def engine_call(
    tool: str, token: str, call: Callable[[], Any], headers: Mapping[str, str] | None = None,
) -> Callable[[], Any]:
    """``call`` (one ``engine.invoke``), inside an ``execute_tool {tool}`` span if enabled.

    Args:
        tool: The tool name the edge sent (``gen_ai.tool.name``, bounded to 100
            characters).
        token: The token text; only its unverified id and agent are read.
        call: The engine's ``invoke``, bound to its arguments.
        headers: The request's HTTP headers: a ``traceparent`` (the edge's
            span, :func:`trace_headers`) makes the span its child.

    Returns:
        ``call`` itself when telemetry is off, else a callable that runs it in
        a span with ``chit.decision``, ``chit.code``, ``chit.agent`` and
        ``chit.token_id``, records ``error.type`` on a refusal, and records
        :data:`ENGINE_DURATION`.
    """
    name = tool[:_CLIENT_TEXT]
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
    return _engine_span(f"execute_tool {name}", "invoke", attributes, token, call, headers)


def engine_offer(
    token: str, call: Callable[[], Any], headers: Mapping[str, str] | None = None,
) -> Callable[[], Any]:
    """``call`` (one ``engine.offer``), inside an ``offer`` span if enabled.

    Args:
        token: The token text; only its unverified id and agent are read.
        call: The engine's ``offer``, bound to its arguments.
        headers: The request's HTTP headers (``traceparent``, as for
            :func:`engine_call`).

    Returns:
        ``call`` itself when telemetry is off, else a callable that runs it in
        a span carrying the offer's ``chit.catalog_hash`` when the token was
        accepted, and records :data:`ENGINE_DURATION`.
    """
    return _engine_span("offer", "offer", {}, token, call, headers)


def _engine_span(
    name: str, operation: str, attributes: dict[str, Any], token: str,
    call: Callable[[], Any], headers: Mapping[str, str] | None,
) -> Callable[[], Any]:
    if not enabled():
        return call

    from opentelemetry import trace
    from opentelemetry.propagate import extract

    parent = None
    if headers is not None and "traceparent" in headers:
        parent = extract({k: headers[k] for k in ("traceparent", "tracestate") if k in headers})

    def traced() -> Any:
        tracer = trace.get_tracer(INSTRUMENTATION)
        measured = {"chit.operation": operation, **attributes}
        start = time.perf_counter()
        with tracer.start_as_current_span(name, context=parent, kind=trace.SpanKind.SERVER,
                                          attributes=attributes) as span:
            try:
                answer = call()
            except Exception as exc:
                measured["error.type"] = type(exc).__qualname__
                raise
            else:
                code = getattr(answer, "code", None)
                span.set_attributes(_identity(token))
                span.set_attribute("chit.decision", "refused" if code else "allowed")
                measured["chit.decision"] = "refused" if code else "allowed"
                if code:
                    outcome = {"chit.code": str(code), "error.type": "tool_error"}
                    span.set_attributes(outcome)
                    measured.update(outcome)
                catalog_hash = getattr(answer, "catalog_hash", None)
                if isinstance(catalog_hash, str):
                    span.set_attribute("chit.catalog_hash", catalog_hash)
                return answer
            finally:
                _state["engine_histogram"].record(time.perf_counter() - start, measured)

    return traced
