"""The README's code blocks, as the tests that keep them pasteable read them.

Every fenced block of shell (`sh`, `bash`, `console`) or Python in README.md carries a marker
on the line before it that says what the tests do with it:

- `<!-- readme: run -->`: tests/e2e/test_readme.py runs it, in README order, in one shell
  (the "second terminal" of "Using it": `export`s, `.venv/bin/activate` and `&` jobs carry
  from block to block) against a live cluster; a Python block runs as a program in it;
- `<!-- readme: background -->`: a terminal of its own that runs beside the next blocks
  until the test presses Ctrl-C (a stream a reader leaves running);
- `<!-- readme: check (why) -->`: not run (it needs what the tests do not have: Spark, a
  Kubernetes cluster, certificates); tests/unit/test_readme.py checks its syntax and the
  options of its `sparkiq` commands, as it does for every block that runs;
- `<!-- readme: skip (why) -->`: neither, for the reason given.

A block without a marker fails tests/unit/test_readme.py, so a new block is classified when
it is written. Output blocks (`text`, `json`) need none.
"""

from __future__ import annotations

import enum
import re
import shlex
import textwrap
from dataclasses import dataclass
from pathlib import Path

import click

README = Path(__file__).resolve().parents[2] / "README.md"

CODE_LANGS = frozenset({"sh", "bash", "console", "python"})
OUTPUT_LANGS = frozenset({"text", "json"})

# The fixed addresses the blocks that run name: the broker (`PORT`: as `sparkiq broker`
# printed it) and the three nodes. tests/e2e/test_readme.py puts its own in their place and
# rewrites nothing else; tests/unit/test_readme.py checks that no other address is named.
ADDRESSES = ("127.0.0.1:PORT", "127.0.0.1:8101", "127.0.0.1:8102", "127.0.0.1:8103")


class Mode(enum.Enum):
    RUN = "run"
    BACKGROUND = "background"
    CHECK = "check"
    SKIP = "skip"


@dataclass(frozen=True)
class Block:
    """One fenced block of the README."""

    line: int  # of the opening fence, 1-based
    lang: str
    text: str  # without the fence's indentation
    mode: Mode | None  # None: no marker before it
    reason: str  # the marker's "(...)", without the parentheses ("" when none)

    @property
    def is_shell(self) -> bool:
        return self.lang in ("sh", "bash", "console")

    def where(self) -> str:
        return f"README.md:{self.line} ({self.lang} block)"


_FENCE = re.compile(r"^\s*```(?P<lang>[\w-]*)\s*$")
_MARKER = re.compile(r"^\s*<!--\s*readme:\s*(?P<mode>[a-z]+)\s*(?:\((?P<reason>.*)\))?\s*-->\s*$")


class ReadmeError(Exception):
    """A README block or marker the tests cannot read (an open fence, an unknown marker)."""


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of the README (or of `text`), in order, with its marker."""
    lines = (README.read_text() if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        lang = fence["lang"]
        end = i + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        if end == len(lines):
            raise ReadmeError(f"README.md:{i + 1}: a fence that is never closed")
        body = textwrap.dedent("\n".join(lines[i + 1 : end])) + "\n"
        mode, reason = _marker_before(lines, i)
        found.append(Block(i + 1, lang, body, mode, reason))
        i = end + 1
    return found


def _marker_before(lines: list[str], fence: int) -> tuple[Mode | None, str]:
    """The marker on the nearest non-blank line before line `fence` (None when none)."""
    j = fence - 1
    while j >= 0 and not lines[j].strip():
        j -= 1
    if j < 0 or "readme:" not in lines[j]:
        return None, ""
    marker = _MARKER.match(lines[j])
    if marker is None:
        raise ReadmeError(f"README.md:{j + 1}: a marker should read <!-- readme: MODE (why) -->")
    try:
        mode = Mode(marker["mode"])
    except ValueError:
        modes = ", ".join(m.value for m in Mode)
        raise ReadmeError(f"README.md:{j + 1}: unknown mode {marker['mode']!r}; {modes}") from None
    return mode, (marker["reason"] or "").strip()


def section(title: str, text: str | None = None) -> str:
    """The text of the README's section `title` (a `## ` or `### ` heading), up to the next
    heading of the same or a higher level."""
    lines = (README.read_text() if text is None else text).splitlines()
    for i, line in enumerate(lines):
        heading = re.match(r"^(#+) (.*)$", line)
        if heading and heading[2].strip() == title:
            level = len(heading[1])
            end = i + 1
            while end < len(lines):
                other = re.match(r"^(#+) ", lines[end])
                if other and len(other[1]) <= level:
                    break
                end += 1
            return "\n".join(lines[i:end])
    raise ReadmeError(f"README.md has no section {title!r}")


# -- shell text as commands -----------------------------------------------------------------------

_HEREDOC = re.compile(r"<<-?\s*(['\"]?)(?P<word>\w+)\1")
_SEPARATORS = frozenset({";", "&", "&&", "|", "||", "(", ")", ";;"})
_REDIRECTS = frozenset({">", ">>", "<", ">&", "<&", "&>", ">|", "<>"})
# Words that open or close a compound command; what follows them is a command.
_KEYWORDS = frozenset({"do", "done", "then", "else", "elif", "fi", "if", "while", "until",
                       "time", "!", "{", "}"})  # fmt: skip
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_lines(block: Block) -> str:
    """The block's shell text; a console block's lines after `$ ` only."""
    if block.lang != "console":
        return block.text
    return "".join(line[2:] + "\n" for line in block.text.splitlines() if line.startswith("$ "))


def logical_lines(shell: str) -> list[str]:
    """The lines of `shell` as the shell reads commands: continued lines joined, heredoc
    bodies (text, not shell) and their `<<'EOF'` dropped."""
    kept: list[str] = []
    lines = shell.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        heredoc = _HEREDOC.search(line)
        i += 1
        if heredoc is not None:
            line = line[: heredoc.start()] + line[heredoc.end() :]
            while i < len(lines) and lines[i].strip() != heredoc["word"]:
                i += 1
            i += 1  # the delimiter
        kept.append(line)
    return "\n".join(kept).replace("\\\n", " ").splitlines()


def _tokens(line: str) -> list[str]:
    """A line's words and operators (`&`, `;`, `>`, ...), comments dropped."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def commands(shell: str) -> list[list[str]]:
    """The simple commands of `shell` as argument lists: heredoc bodies, comments,
    redirections, assignments before a command and `for` lists dropped; a `...` argument
    ("and the rest", as the README writes it) too."""
    found: list[list[str]] = []
    for line in logical_lines(shell):
        current: list[str] = []
        tokens = _tokens(line)
        k = 0
        while k < len(tokens):
            token = tokens[k]
            k += 1
            if token in _SEPARATORS:
                found.append(current)
                current = []
            elif token in _REDIRECTS:
                k += 1  # and its target
            elif token.isdigit() and k < len(tokens) and _descriptor(token, tokens[k], line):
                continue  # a descriptor number: the 2 of `2>&1`
            elif not current and (token in _KEYWORDS or _ASSIGNMENT.match(token)):
                continue
            elif token != "...":
                current.append(token)
        found.append(current)
    return [c for c in found if c and c[0] != "for"]


def cut_lines(shell: str) -> list[str]:
    """The lines of `shell` where an unquoted `&` is followed by more on the line: a URL's
    `&` the shell took for "run in the background", cutting the command there."""
    return [line.strip() for line in logical_lines(shell) if "&" in _tokens(line)[:-1]]


def _descriptor(token: str, following: str, line: str) -> bool:
    """Whether `token` is the descriptor of a redirection (the 2 of `2>&1`, not of `2 > f`)."""
    return following in _REDIRECTS and token + following in line


def is_sparkiq(argv: list[str]) -> bool:
    return argv[0] == "sparkiq" or argv[0].endswith("/sparkiq")


def check_sparkiq(argv: list[str]) -> None:
    """Parse a `sparkiq` command line as the CLI would, short of running it: the command and
    its subcommands exist, every option is one of theirs and has its value, a choice is one
    of its choices, a number parses, and the arguments are as many as it takes. Raises
    `click.ClickException` (or `AssertionError`) saying what is wrong."""
    from sparkiq.cli.main import main

    command: click.Command = main
    args = list(argv[1:])
    name = "sparkiq"
    while isinstance(command, click.Group):
        if not args:
            raise click.UsageError(f"{name} needs a command", None)
        ctx = click.Context(command, info_name=name)
        sub = command.get_command(ctx, args[0])
        if sub is None:
            raise click.UsageError(f"{name} has no command {args[0]!r}", None)
        name = f"{name} {args.pop(0)}"
        command = sub
    ctx = click.Context(command, info_name=name)
    opts, extra, _ = command.make_parser(ctx).parse_args(args)  # arguments land in opts
    assert not extra, f"{name} takes no more arguments than {extra[0]!r}"
    for param in command.params:
        if isinstance(param, click.Argument) and param.required:
            given = opts.get(param.name)  # absent: None, or click's sentinel for "unset"
            assert isinstance(given, str) or (isinstance(given, list | tuple) and given), (
                f"{name} needs {param.human_readable_name}"
            )
    for param in command.params:
        if not isinstance(param, click.Option) or param.name not in opts:
            continue
        values = opts[param.name]
        for value in values if isinstance(values, list) else [values]:
            if isinstance(value, str) and isinstance(param.type, _CHECKED_TYPES):
                param.type.convert(value, param, ctx)


_CHECKED_TYPES = (click.Choice, click.types.IntParamType, click.types.FloatParamType)
