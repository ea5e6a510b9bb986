"""Version control over a real git repository, in git object space only.

The engine's only door to git (docs/architecture.md, "Version control"): tools,
audit and the semantic index use the :class:`Repository` facade and the names
exported here.
"""

from engine.git.repository import (
    LANE_PREFIX,
    LOG_LIMIT_MAX,
    LOG_SCAN_MAX,
    MAIN,
    MODE_EXECUTABLE,
    MODE_FILE,
    MODE_SYMLINK,
    STORE_PREFIX,
    Repository,
    StagedChange,
    commit_trailers,
    common_dir,
    lane_ref,
    private_folder,
)

__all__ = [
    "LANE_PREFIX",
    "LOG_LIMIT_MAX",
    "LOG_SCAN_MAX",
    "MAIN",
    "MODE_EXECUTABLE",
    "MODE_FILE",
    "MODE_SYMLINK",
    "STORE_PREFIX",
    "Repository",
    "StagedChange",
    "commit_trailers",
    "common_dir",
    "lane_ref",
    "private_folder",
]
