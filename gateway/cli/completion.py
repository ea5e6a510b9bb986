"""``chit completion bash|zsh``: a shell completion script made from the command tree (README.md).

The script is generated from the same argparse parser the CLI runs, so it
names exactly the commands and options this version has; file names are left
to the shell. Install: ``source <(chit completion bash)`` in ``~/.bashrc``, or
``chit completion zsh > "${fpath[1]}/_chit"``.
"""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from gateway.cli._output import EXIT_OK

if TYPE_CHECKING:
    from argparse import _SubParsersAction

__all__ = ["add_completion", "script"]


def add_completion(
    sub: _SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser
) -> None:
    """Add ``chit completion`` to ``sub``."""
    p = sub.add_parser("completion", help="print a shell completion script (bash or zsh)")
    p.add_argument("shell", choices=["bash", "zsh"])
    p.set_defaults(func=cmd_completion)


def cmd_completion(args: argparse.Namespace) -> int:
    """Print the script for ``args.shell``."""
    print(script(args.root_parser, args.shell), end="")
    return EXIT_OK


def _walk(
    parser: argparse.ArgumentParser, path: str, out: dict[str, tuple[list[str], list[str]]]
) -> None:
    options: list[str] = []
    commands: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                commands.append(name)
                _walk(child, f"{path} {name}".strip(), out)
        else:
            options.extend(action.option_strings)
    out[path] = (sorted(set(options)), commands)


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script of ``parser`` for ``shell`` (``bash`` or ``zsh``).

    Args:
        parser: The CLI's parser (:func:`gateway.cli.parser.build_parser`).
        shell: ``bash``, or ``zsh`` (the same function through ``bashcompinit``).

    Returns:
        The script's text.
    """
    tree: dict[str, tuple[list[str], list[str]]] = {}
    _walk(parser, "", tree)
    subs = "\n".join(f"    {shlex.quote(path)}) echo {shlex.quote(' '.join(commands))} ;;"
                     for path, (_o, commands) in sorted(tree.items()) if commands)
    opts = "\n".join(f"    {shlex.quote(path)}) echo {shlex.quote(' '.join(options))} ;;"
                     for path, (options, _c) in sorted(tree.items()))
    body = f"""_chit_commands() {{
  case "$1" in
{subs}
  esac
}}
_chit_options() {{
  case "$1" in
{opts}
  esac
}}
_chit() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" word i
  for ((i = 1; i < COMP_CWORD; i++)); do
    word="${{COMP_WORDS[i]}}"
    case " $(_chit_commands "$path") " in
      *" $word "*) path="${{path:+$path }}$word" ;;
    esac
  done
  if [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "$(_chit_options "$path")" -- "$cur"))
  else
    COMPREPLY=($(compgen -W "$(_chit_commands "$path")" -- "$cur"))
  fi
}}
complete -o default -F _chit chit
"""
    if shell == "zsh":
        return "#compdef chit\nautoload -U +X bashcompinit && bashcompinit\n" + body
    return "# chit completion for bash: source <(chit completion bash)\n" + body
