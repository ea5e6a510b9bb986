"""Version control over a real git repository, in git object space only.

The engine's only door to git (docs/architecture.md, "Version control"): tools,
audit and the semantic index use the :class:`Repository` facade and the names
exported here. A repository's remote is reached by the ``git`` command, for
the transport only (docs/architecture.md, "Lanes on the organisation's remote").
"""

from engine.git.ancestry import BaseCommit
from engine.git.handle import common_dir, private_folder
from engine.git.history import commit_trailers
from engine.git.listing import ViewEntry, sort_key
from engine.git.reconcile import PARKED_PREFIX
from engine.git.refs import LANE_PREFIX, MAIN, NOTES_REF, STORE_PREFIX, UPSTREAM_PREFIX, lane_ref
from engine.git.replica import Replica
from engine.git.repository import Repository
from engine.git.saved import SESSION_FOLDER, Owner, SaveCache, SavedSession, session_ref
from engine.git.transport import redact
from engine.git.views import MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK, StagedChange

__all__ = [
    "LANE_PREFIX",
    "MAIN",
    "MODE_EXECUTABLE",
    "MODE_FILE",
    "MODE_SYMLINK",
    "NOTES_REF",
    "PARKED_PREFIX",
    "SESSION_FOLDER",
    "STORE_PREFIX",
    "UPSTREAM_PREFIX",
    "BaseCommit",
    "Owner",
    "Replica",
    "Repository",
    "SaveCache",
    "SavedSession",
    "StagedChange",
    "ViewEntry",
    "commit_trailers",
    "common_dir",
    "lane_ref",
    "private_folder",
    "redact",
    "session_ref",
    "sort_key",
]
