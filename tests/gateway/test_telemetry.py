"""OpenTelemetry (docs/telemetry.md): one span per call, chit's attributes, nothing secret.

The edges run in this process (the MCP server over the SDK's in-memory
streams, the HTTP edge on loopback) so that the SDK's in-memory span exporter
and metric reader see what they export; one test runs ``chit mcp --otel`` as a
real stdio subprocess with the console exporter and reads its spans on stderr.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.shared.exceptions import MCPError
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from engine import admin
from engine.service import Engine, resolve_repo_specs
from gateway import telemetry
from gateway.http_edge import HttpEdge, HttpSettings
from gateway.http_edge.run import bind, uvicorn_config
from gateway.mcp_server import build_server
from tests.conftest import World
from tests.gateway.http_client import http_client
from tests.gateway.mcp_client import engine_server, remote_edge_params

SECRET_CONTENT = "CONTENT_6f1c2a_never_exported = 1\n"


class Exported:
    """The in-memory span exporter and metric reader behind this module's global providers."""

    def __init__(self) -> None:
        self.spans = InMemorySpanExporter()
        self.metrics = InMemoryMetricReader()

    def server_spans(self) -> list[ReadableSpan]:
        return [s for s in self.spans.get_finished_spans() if s.kind == SpanKind.SERVER]

    def durations(self) -> list[dict[str, Any]]:
        """The data points of ``mcp.server.operation.duration``: their attributes and counts."""
        points: list[dict[str, Any]] = []
        data = self.metrics.get_metrics_data()
        for rm in data.resource_metrics if data else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    if metric.name == telemetry.DURATION:
                        assert metric.unit == "s"
                        points += [{"attributes": dict(p.attributes), "count": p.count}
                                   for p in metric.data.data_points]
        return points


@pytest.fixture(scope="module")
def exported() -> Iterator[Exported]:
    out = Exported()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(out.spans))
    meter_provider = MeterProvider(metric_readers=[out.metrics])
    trace.set_tracer_provider(tracer_provider)
    metrics.set_meter_provider(meter_provider)
    telemetry.enable(configure=False)
    yield out
    telemetry.disable()
    tracer_provider.shutdown()
    meter_provider.shutdown()


@pytest.fixture
def spans(exported: Exported) -> Exported:
    exported.spans.clear()
    return exported


def _engine(world: World) -> Engine:
    return Engine(world.home, resolve_repo_specs(world.home, [str(world.repo)]))


async def _calls(client: Client) -> None:
    """A listing, an allowed write, an isError refusal and a JSON-RPC refusal."""
    await client.list_tools()
    ok = await client.call_tool("write_file", {"path": "src/app.py", "content": SECRET_CONTENT})
    assert not ok.is_error
    refused = await client.call_tool("write_file", {"path": "docs/x.md", "content": SECRET_CONTENT})
    assert refused.is_error
    with pytest.raises(MCPError) as raised:
        await client.call_tool("delete_branch", {"name": SECRET_CONTENT})
    assert raised.value.error.code == -32602


def _calls_of(spans: list[ReadableSpan]) -> dict[str, list[ReadableSpan]]:
    out: dict[str, list[ReadableSpan]] = {}
    for span in spans:
        out.setdefault(span.name, []).append(span)
    return out


def _check_calls(exported: Exported, world: World, token: str, transport: str) -> None:
    by_name = _calls_of(exported.server_spans())
    # One SERVER span per call, named "{mcp.method.name} {gen_ai.tool.name}".
    assert len(by_name["tools/list"]) == 1
    writes = by_name["tools/call write_file"]
    assert len(writes) == 2
    assert len(by_name["tools/call delete_branch"]) == 1
    identity = admin.inspect_token(token)
    listed = None
    for span in writes + by_name["tools/call delete_branch"]:
        attrs = dict(span.attributes or {})
        assert attrs["mcp.method.name"] == "tools/call"
        assert attrs["gen_ai.operation.name"] == "execute_tool"
        assert attrs["gen_ai.tool.name"] in {"write_file", "delete_branch"}
        assert attrs["jsonrpc.request.id"]
        assert attrs["mcp.protocol.version"]
        assert attrs["network.transport"] == transport
        assert attrs["chit.agent"] == identity["agent"] == "alice"
        assert attrs["chit.token_id"] == identity["id"]
        listed = listed or attrs["chit.catalog_hash"]
        assert attrs["chit.catalog_hash"] == listed
    allowed, refused = (dict(s.attributes or {}) for s in writes)
    assert allowed["chit.decision"] == "allowed"
    assert "error.type" not in allowed and "chit.code" not in allowed
    assert refused["chit.decision"] == "refused"
    assert refused["chit.code"] == "path_outside_scope"
    assert refused["error.type"] == "tool_error"
    unknown = dict(by_name["tools/call delete_branch"][0].attributes or {})
    assert unknown["error.type"] == "-32602"
    assert unknown["chit.decision"] == "refused"
    assert unknown["chit.code"] == "tool_not_offered"
    _nothing_secret(exported.spans.get_finished_spans(), token)


def _nothing_secret(spans: Any, token: str) -> None:
    """Threat: telemetry leaking an agent's token or data to a collector."""
    needles = [token, token[:24], token[-24:], SECRET_CONTENT.strip(), "never_exported"]
    for span in spans:
        values = [span.name, *(str(v) for v in (span.attributes or {}).values())]
        values += [str(span.status.description or "")]
        for event in span.events:
            values += [str(v) for v in (event.attributes or {}).values()]
        for value in values:
            for needle in needles:
                assert needle not in value, f"{needle[:12]}... exported in span {span.name}"


def test_stdio_edge_one_span_per_call_with_chits_attributes(
    world: World, spans: Exported
) -> None:
    token = world.mint()
    with _engine(world) as engine:
        server = build_server(engine, token)

        async def run() -> None:
            async with Client(server) as client:
                await _calls(client)

        anyio.run(run)
    _check_calls(spans, world, token, "pipe")
    points = [p for p in spans.durations() if p["attributes"]["network.transport"] == "pipe"]
    by_tool = {(p["attributes"].get("gen_ai.tool.name"), p["attributes"].get("error.type")): p
               for p in points}
    assert by_tool[("write_file", "tool_error")]["count"] >= 1
    assert by_tool[("delete_branch", "-32602")]["count"] >= 1
    assert by_tool[("write_file", None)]["count"] >= 1


def test_a_long_tool_name_is_cut_in_span_names_and_attributes(
    world: World, spans: Exported
) -> None:
    """Threat: a client growing every span and exporter payload with a name of its choosing."""
    token = world.mint()
    long_name = "x\x1b" + "y" * 3000
    with _engine(world) as engine:
        server = build_server(engine, token)

        async def run() -> None:
            async with Client(server) as client:
                await client.list_tools()
                with pytest.raises(MCPError):
                    await client.call_tool(long_name, {})

        anyio.run(run)
    (span,) = [s for s in spans.server_spans() if s.name.startswith("tools/call x")]
    assert span.name == f"tools/call {long_name[:100]}"
    assert (span.attributes or {})["gen_ai.tool.name"] == long_name[:100]
    for value in (span.attributes or {}).values():
        assert len(str(value)) <= 100


def test_trace_context_flows_to_the_servers_span(world: World, spans: Exported) -> None:
    token = world.mint()
    with _engine(world) as engine:
        server = build_server(engine, token)

        async def run() -> None:
            async with Client(server) as client:
                await client.list_tools()
                with trace.get_tracer("test").start_as_current_span("agent turn"):
                    await client.call_tool("status", {})

        anyio.run(run)
    status = _calls_of(spans.server_spans())["tools/call status"][0]
    sent = next(s for s in spans.spans.get_finished_spans() if s.name == "agent turn")
    assert status.context.trace_id == sent.context.trace_id


@contextmanager
def _http_edge(engine: Engine) -> Iterator[str]:
    import uvicorn

    settings = HttpSettings("127.0.0.1", 0)
    sock = bind(settings)
    edge = HttpEdge(engine, settings, port=sock.getsockname()[1])
    server = uvicorn.Server(uvicorn_config(edge.app))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive(), "the edge did not start"
            time.sleep(0.02)
        yield edge.resource
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()


def test_http_edge_spans_say_tcp_and_carry_no_token(world: World, spans: Exported) -> None:
    token = world.mint()
    with _engine(world) as engine, _http_edge(engine) as url:

        async def run() -> None:
            async with http_client(url, token) as (client, _):
                await _calls(client)

        anyio.run(run)
    _check_calls(spans, world, token, "tcp")


def test_off_by_default_no_sdk_is_imported(world: World) -> None:
    code = ("import sys, gateway.cli.serve, gateway.mcp_server, gateway.http_edge, "
            "gateway.engine_server.app\n"
            "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', "
            "'opentelemetry.exporter'))))")
    env = {k: v for k, v in os.environ.items() if k != telemetry.ENV_FLAG}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=env, check=True)
    assert out.stdout.strip() == "[]"


def test_real_stdio_with_console_exporter_writes_spans_to_stderr(
    world: World, tmp_path: Any, spans: Exported
) -> None:
    token = world.mint()
    env = dict(os.environ, CHIT_TOKEN=token, CHIT_OTEL="1", OTEL_TRACES_EXPORTER="console",
               OTEL_METRICS_EXPORTER="none", OTEL_BSP_SCHEDULE_DELAY="50")
    errlog = tmp_path / "stderr.txt"
    env["ERRLOG"] = str(errlog)
    params = StdioServerParameters(  # the edge's stderr (its console exporter) into a file
        command="/bin/sh",
        args=["-c", 'exec "$0" "$@" 2>"$ERRLOG"', sys.executable, "-m", "gateway.cli",
              "--home", str(world.home), "mcp", "--repo", str(world.repo)],
        env=env,
    )

    async def run() -> None:
        async with Client(params) as client:
            await client.list_tools()
            ok = await client.call_tool(
                "write_file", {"path": "src/app.py", "content": SECRET_CONTENT})
            assert not ok.is_error  # stdout stayed a clean MCP channel
            # The traceparent reaches the subprocess only in the request's _meta.
            with trace.get_tracer("test").start_as_current_span("agent turn"):
                refused = await client.call_tool(
                    "write_file", {"path": "docs/x.md", "content": SECRET_CONTENT})
            assert refused.is_error

    anyio.run(run)
    turn = next(s for s in spans.spans.get_finished_spans() if s.name == "agent turn")
    text = errlog.read_text()
    assert token not in text and "never_exported" not in text
    found = _console_spans(text)
    calls = [d for d in found if d["name"] == "tools/call write_file"
             and d["kind"] == "SpanKind.SERVER"]
    assert len(calls) == 2
    by_decision = {d["attributes"]["chit.decision"]: d for d in calls}
    assert sorted(by_decision) == ["allowed", "refused"]
    refused_span = by_decision["refused"]
    assert refused_span["context"]["trace_id"] == f"0x{turn.context.trace_id:032x}"
    assert refused_span["attributes"]["error.type"] == "tool_error"
    assert refused_span["attributes"]["chit.code"] == "path_outside_scope"
    assert by_decision["allowed"]["context"]["trace_id"] != refused_span["context"]["trace_id"]
    for doc in calls:
        assert doc["attributes"]["network.transport"] == "pipe"
        assert doc["attributes"]["chit.agent"] == "alice"


def _console_spans(text: str) -> list[dict[str, Any]]:
    """The span documents the console exporter wrote into ``text`` (among other lines)."""
    decoder = json.JSONDecoder()
    found: list[dict[str, Any]] = []
    at = text.find("{")
    while at != -1:
        try:
            doc, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        if isinstance(doc, dict) and "attributes" in doc and "kind" in doc:
            found.append(doc)
        at = text.find("{", end)
    return found


def _engine_durations(text: str, operations: set[str]) -> bool:
    """Whether the console metrics carry the engine's histogram for every operation named."""
    seen: set[str] = set()
    at = text.find("{")
    decoder = json.JSONDecoder()
    while at != -1:
        try:
            doc, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError:
            at = text.find("{", at + 1)
            continue
        for rm in doc.get("resource_metrics", []) if isinstance(doc, dict) else []:
            for sm in rm.get("scope_metrics", []):
                for metric in sm.get("metrics", []):
                    if metric.get("name") == telemetry.ENGINE_DURATION:
                        seen |= {p["attributes"].get("chit.operation")
                                 for p in metric["data"]["data_points"] if p.get("count")}
        at = text.find("{", end)
    return operations <= seen


def test_engine_serve_otel_spans_each_invoke(
    world: World, tmp_path: Any, monkeypatch: pytest.MonkeyPatch, spans: Exported
) -> None:
    token = world.mint()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRICS_EXPORTER", "console")
    monkeypatch.setenv("OTEL_METRIC_EXPORT_INTERVAL", "100")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
    monkeypatch.delenv(telemetry.ENV_FLAG, raising=False)
    edge_home = tmp_path / "edge-home"
    with engine_server(world.home, world.repo, "--otel", "--workers", "2") as server:
        # The edge exports nothing but passes its span on to the engine (traceparent).
        params = remote_edge_params(server.url, edge_home, token, "--otel")
        params.env = {**(params.env or {}), "OTEL_TRACES_EXPORTER": "none",
                      "OTEL_METRICS_EXPORTER": "none"}

        async def run() -> None:
            async with Client(params) as client:
                await client.list_tools()
                ok = await client.call_tool(
                    "write_file", {"path": "src/app.py", "content": SECRET_CONTENT})
                assert not ok.is_error
                with trace.get_tracer("test").start_as_current_span("agent turn"):
                    refused = await client.call_tool(
                        "write_file", {"path": "docs/x.md", "content": SECRET_CONTENT})
                assert refused.is_error

        anyio.run(run)
        deadline = time.monotonic() + 30
        while len([d for d in _console_spans(server.output())
                   if d["name"] == "execute_tool write_file"]) < 2 or not _engine_durations(
                       server.output(), {"invoke", "offer"}):
            assert time.monotonic() < deadline, server.output()
            time.sleep(0.05)
        text = server.output()
    assert token not in text and "never_exported" not in text
    offers = [d for d in _console_spans(text) if d["name"] == "offer"]
    assert offers and offers[0]["attributes"]["chit.catalog_hash"].startswith("sha256:")
    assert offers[0]["attributes"]["chit.agent"] == "alice"
    assert offers[0]["attributes"]["chit.decision"] == "allowed"
    docs = {d["attributes"]["chit.decision"]: d for d in _console_spans(text)
            if d["name"] == "execute_tool write_file"}
    turn = next(s for s in spans.spans.get_finished_spans() if s.name == "agent turn")
    # agent -> edge (_meta) -> engine (traceparent header): one trace.
    assert docs["refused"]["context"]["trace_id"] == f"0x{turn.context.trace_id:032x}"
    assert docs["refused"]["parent_id"] is not None
    calls = {k: d["attributes"] for k, d in docs.items()}
    assert calls["allowed"]["chit.agent"] == "alice"
    assert calls["allowed"]["chit.token_id"] == admin.inspect_token(token)["id"]
    assert "error.type" not in calls["allowed"]
    assert calls["refused"]["chit.code"] == "path_outside_scope"
    assert calls["refused"]["error.type"] == "tool_error"
