"""``POST /v1/invoke`` carries the approval id a client echoed, strictly (chit-engine/1)."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
import uvicorn

from gateway import engine_server
from gateway.remote_engine import RemoteEngine

APPROVAL_ID = "apr_" + "q" * 26
BODY = {"token": "t", "tool": "commit", "arguments": {"message": "m"}, "session": "s"}


class _Recording:
    """An engine that records what ``invoke`` was given and answers a fixed result."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def offer(self, token: str, *, repo: str | None = None) -> dict[str, Any]:
        return {"ok": False, "error": {"error": "token_malformed", "message": "m"}}

    def invoke(self, token: str, tool: str, arguments: dict[str, Any] | None, *, session: str,
               offered_catalog_hash: str | None = None, repo: str | None = None,
               **more: Any) -> dict[str, Any]:
        self.calls.append({"tool": tool, "session": session, **more})
        return {"ok": True, "result": {"ran": tool}}


@pytest.fixture
def served() -> Iterator[tuple[_Recording, str]]:
    folder = Path(tempfile.mkdtemp(prefix="chit-w-"))
    engine = _Recording()
    listener = engine_server.bind_unix(folder / "e.sock")
    server = uvicorn.Server(uvicorn.Config(engine_server.create_app(engine), lifespan="off",
                                           log_config=None, access_log=False))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listener.sock]})
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started:
            assert time.monotonic() < deadline and thread.is_alive()
            time.sleep(0.02)
        yield engine, listener.url
    finally:
        server.should_exit = True
        thread.join(30)
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


def _post(url: str, body: dict[str, Any]) -> httpx2.Response:
    transport = httpx2.HTTPTransport(uds=url.removeprefix("unix:"), trust_env=False)
    with httpx2.Client(transport=transport, trust_env=False, timeout=30) as client:
        return client.post("http://chit-engine/v1/invoke", json=body)


def test_the_remote_engine_passes_the_approval_on(served: tuple[_Recording, str]) -> None:
    engine, url = served
    with RemoteEngine(url) as remote:
        assert remote.invoke("t", "commit", {}, session="s", approval=APPROVAL_ID).ok
        assert remote.invoke("t", "status", {}, session="s").ok
    assert engine.calls == [{"tool": "commit", "session": "s", "approval": APPROVAL_ID},
                            {"tool": "status", "session": "s"}]


def test_an_absent_or_null_approval_is_none(served: tuple[_Recording, str]) -> None:
    engine, url = served
    assert _post(url, {**BODY, "approval": None}).status_code == 200
    assert engine.calls == [{"tool": "commit", "session": "s"}]


@pytest.mark.parametrize("approval", [
    5, True, [APPROVAL_ID], {"id": APPROVAL_ID}, "", "apr_x", APPROVAL_ID.upper(),
    APPROVAL_ID + " ", "apr_" + "0" * 26,
])
def test_an_approval_of_another_form_never_reaches_the_engine(
    served: tuple[_Recording, str], approval: object,
) -> None:
    # Threat: a malformed id (or an injection through it) reaching the engine's store lookup.
    engine, url = served
    response = _post(url, {**BODY, "approval": approval})
    assert response.status_code == 400
    assert response.json()["error"]["error"] == "invalid_argument"
    assert response.json()["error"]["fields"] == ["approval"]
    assert engine.calls == []
