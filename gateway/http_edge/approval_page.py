"""``GET /approvals/<id>``: the page an MCP client sends a person to (URL-mode elicitation).

It shows what a waiting call asks (the tool, its paths, the summary of a
commit or the grant of a delegation), who may approve, why, until when, and
the commands an operator runs; it is read-only: nothing on it approves, and it
carries nothing secret (no token, no argument contents, no key). The edge
remembers the approvals it relayed (:class:`ApprovalBook`); for an id it did
not relay (another worker's, or from before a restart) the page still shows
the commands. The id, 128 random bits, is what lets a person see the page
(docs/approvals.md, "MCP clients").
"""

from __future__ import annotations

import html
import time
from collections import OrderedDict
from typing import Any

from starlette.requests import Request
from starlette.responses import HTMLResponse, Response

from gateway.approvals import valid_approval_id

__all__ = ["APPROVALS_PATH", "BOOK_SIZE", "ApprovalBook", "page_path"]

APPROVALS_PATH = "/approvals/{id}"
BOOK_SIZE = 1024  # approvals one edge process remembers for its page (the oldest forgotten)
_LISTED = 50  # paths shown before "and N more"
_TEXT_CHARS = 2000  # characters of one field shown
HEADERS = {
    "cache-control": "no-store",
    "content-security-policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
    "x-frame-options": "DENY",
}


def page_path(approval_id: str) -> str:
    """The path of an approval's page."""
    return APPROVALS_PATH.replace("{id}", approval_id)


class ApprovalBook:
    """The approvals this edge relayed, by id, for their pages.

    Args:
        size: How many are kept; past it the oldest is forgotten.
    """

    def __init__(self, size: int = BOOK_SIZE) -> None:
        self._size = size
        self._book: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def __repr__(self) -> str:
        return f"ApprovalBook({len(self._book)})"

    def note(self, approval: dict[str, Any]) -> None:
        """Remember the ``approval`` hints of a refusal the edge relayed."""
        approval_id = str(approval["id"])
        self._book[approval_id] = dict(approval)
        self._book.move_to_end(approval_id)
        while len(self._book) > self._size:
            self._book.popitem(last=False)

    def get(self, approval_id: str) -> dict[str, Any] | None:
        """The hints of ``approval_id``, or ``None`` if this edge did not relay it."""
        return self._book.get(approval_id)

    async def endpoint(self, request: Request) -> Response:
        """Answer ``GET /approvals/<id>``: the page, or 404 for what is not an approval id."""
        approval_id = request.path_params.get("id")
        if not valid_approval_id(approval_id):
            return HTMLResponse(_document("Not found", "<p>No such approval.</p>"),
                                status_code=404, headers=HEADERS)
        body = render(str(approval_id), self.get(str(approval_id)))
        return HTMLResponse(body, headers=HEADERS)


def _text(value: object) -> str:
    text = str(value)
    if len(text) > _TEXT_CHARS:
        text = text[: _TEXT_CHARS - 3] + "..."
    return html.escape(text)


def _when(value: object) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(value))


def _document(title: str, body: str) -> str:
    return (
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<meta name=\"robots\" content=\"noindex\"><title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;max-width:48rem;margin:2rem auto;padding:0 1rem}"
        "code,pre{background:#f4f4f4;padding:.1rem .3rem}dt{font-weight:bold}</style>"
        f"</head><body>{body}</body></html>\n"
    )


def render(approval_id: str, approval: dict[str, Any] | None) -> str:
    """The page of one approval.

    Args:
        approval_id: A well-formed approval id.
        approval: Its hints as the engine gave them, or ``None`` if this edge
            did not relay it.

    Returns:
        The HTML document; every value from the hints is escaped.
    """
    rows: list[str] = []
    if approval is not None:
        rows.append(f"<dt>Tool</dt><dd><code>{_text(approval.get('tool', ''))}</code></dd>")
        paths = [p for p in approval.get("paths") or [] if isinstance(p, str)]
        if paths:
            items = "".join(f"<li><code>{_text(p)}</code></li>" for p in paths[:_LISTED])
            if len(paths) > _LISTED:
                items += f"<li>and {len(paths) - _LISTED} more</li>"
            rows.append(f"<dt>Paths</dt><dd><ul>{items}</ul></dd>")
        for key, label in (("summary", "Change"), ("grant", "Requested grant")):
            if approval.get(key) is not None:
                rows.append(f"<dt>{label}</dt><dd><pre>{_text(_plain(approval[key]))}</pre></dd>")
        approvers = [a for a in approval.get("approvers") or [] if isinstance(a, str)]
        if approvers:
            rows.append("<dt>Who may approve</dt><dd>"
                        + ", ".join(f"<code>{_text(a)}</code>" for a in approvers) + "</dd>")
        if approval.get("reason"):
            rows.append(f"<dt>Reason</dt><dd>{_text(approval['reason'])}</dd>")
        expires = _when(approval.get("expires_at"))
        if expires:
            rows.append(f"<dt>Expires</dt><dd>{expires}</dd>")
        asked = f"<dl>{''.join(rows)}</dl>"
    else:
        asked = ("<p>This edge has no details of this approval (another process of "
                 "the edge relayed it, or it restarted since); the first command below "
                 "shows them.</p>")
    code = html.escape(approval_id)
    body = (
        f"<h1>Approval <code>{code}</code></h1>"
        "<p>An agent's call waits for an operator's approval. Nothing was staged "
        "or changed; the agent calls again with the same arguments once it is decided.</p>"
        f"{asked}<h2>How an operator decides</h2>"
        f"<pre>chit approvals show {code}\nchit approve {code} --as NAME [--note TEXT]\n"
        f"chit deny {code} --as NAME [--note TEXT]</pre>"
        "<p>An approval is signed with the operator's own key on the operator's "
        "machine; this page cannot approve, and shows no decision.</p>"
    )
    return _document(f"Approval {approval_id}", body)


def _plain(value: object) -> str:
    if isinstance(value, dict):
        return "\n".join(f"{k}: {_plain(v)}" for k, v in value.items())
    if isinstance(value, list):
        return ", ".join(_plain(v) for v in value)
    return str(value)
