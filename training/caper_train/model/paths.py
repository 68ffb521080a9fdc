"""How a path is written into what training leaves for others to read: caper.json, MODEL_CARD.md,
result files and the command lines they quote. Those are committed, so a path in them must mean the
same on every checkout, not name a directory of the machine that wrote them. The rule is
src/core/paths.ts's (shownPath, shownArgs), for what the Python side writes."""
from __future__ import annotations

import os
import re

# abspath rather than resolve(): the paths compared with it come from command lines and are not
# followed through symbolic links either.
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_FLAG_VALUE = re.compile(r"^(--[^=]+=)(.*)$", re.S)


def shown_path(p, root: str = REPO) -> str:
    """An absolute `p` relative to the repo root when it lies in the checkout or beside it (the
    data root ../shared/data/spider is a sibling of the checkout); elsewhere absolute, since a
    relative name climbing out of the checkout's parent would still spell out this machine's
    directories. A relative `p` as given: it is relative to where the command ran (the repo root,
    for the documented runs), and may be no path at all (a model hub id)."""
    p = os.fspath(p)
    if not os.path.isabs(p):
        return p
    p = os.path.normpath(p)
    if os.path.splitdrive(p)[0].lower() != os.path.splitdrive(root)[0].lower():
        return p  # another drive (Windows)
    rel = os.path.relpath(p, root)
    if rel == ".":
        return "."
    outside = os.path.relpath(p, os.path.dirname(root))
    if outside == ".." or outside.startswith(".." + os.sep):
        return p
    return rel.replace(os.sep, "/")


def shown_args(args, root: str = REPO) -> list[str]:
    """A command line's arguments as a committed file should quote them: each one, and the value
    of --flag=VALUE, through shown_path."""
    out = []
    for a in map(str, args):
        m = _FLAG_VALUE.match(a)
        out.append(m.group(1) + shown_path(m.group(2), root) if m else shown_path(a, root))
    return out


def shown_command(module: str, argv) -> str:
    """`python -m MODULE ARGS` as caper.json's `command` records it."""
    return " ".join(["python -m " + module, *shown_args(argv)])
