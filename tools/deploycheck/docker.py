"""Check the Dockerfile: layer order, non-root user, health check, environment, commands.

The default command must start a service module whose default options load,
and the ``python -m ftrl_ps`` commands run at build time (the numba warm-up)
must still parse with the real ``ftrl-ps`` parser.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

from tools.deploycheck.launch import ROOT, launch, parse_cli

__all__ = ["check_dockerfile", "dockerfile_instructions", "image_user", "owned_dirs"]


def dockerfile_instructions(text: str) -> list[tuple[str, str]]:
    """``(INSTRUCTION, arguments)`` with continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    buf = ""
    for line in text.splitlines():
        if not buf and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if buf and line.lstrip().startswith("#"):
            continue
        if line.rstrip().endswith("\\"):
            buf += line.rstrip()[:-1] + " "
            continue
        full = (buf + line).strip()
        buf = ""
        word, _, rest = full.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def check_dockerfile(text: str, root: Path = ROOT) -> list[str]:
    """Problems of the Dockerfile: layer order, user, health check, env, commands."""
    problems: list[str] = []
    ins = dockerfile_instructions(text)
    kinds = [k for k, _ in ins]
    if not ins or ins[0][0] != "FROM" or not re.match(r"python:3\.11(\.\d+)?-slim", ins[0][1]):
        problems.append("Dockerfile: must start FROM python:3.11-slim")
    pip = next((i for i, (k, a) in enumerate(ins) if k == "RUN" and "pip install" in a), None)
    copies = [(i, a.split()) for i, (k, a) in enumerate(ins) if k == "COPY"]
    source = [i for i, parts in copies if any(p.rstrip("/") in (".", "ftrl_ps", "services")
                                               for p in parts[:-1])]
    if pip is None or not source or pip > min(source):
        problems.append("Dockerfile: dependencies must be installed (RUN pip install) before "
                        "the source is copied")
    if not any(i < (pip or 0) and "pyproject.toml" in parts for i, parts in copies):
        problems.append("Dockerfile: copy pyproject.toml before installing the dependencies")
    for _i, parts in copies:
        for src in parts[:-1]:
            if not src.startswith("--") and not (root / src).exists():
                problems.append(f"Dockerfile: COPY source {src} does not exist")
    users = [a for k, a in ins if k == "USER"]
    if not users or users[-1].split(":")[0] in ("root", "0"):
        problems.append("Dockerfile: must switch to a non-root USER")
    env = " ".join(a for k, a in ins if k == "ENV")
    for needed in ("PYTHONUNBUFFERED=1", "NUMBA_CACHE_DIR="):
        if needed not in env:
            problems.append(f"Dockerfile: ENV {needed} missing")
    if re.search(r"\bFTRL_PS_\w+=", env):
        problems.append("Dockerfile: no FTRL_PS_* ENV (every service would get it)")
    cache = re.search(r"\bNUMBA_CACHE_DIR=(\S+)", env)
    if users and cache and cache.group(1).rstrip("/") not in owned_dirs(text):
        problems.append(f"Dockerfile: NUMBA_CACHE_DIR {cache.group(1)} must be created (mkdir) "
                        f"and chown'ed to the USER {users[-1]}: numba writes its cache there")
    problems += _check_docker_commands(ins, kinds)
    return problems


def _exec_form(where: str, args: str, problems: list[str]) -> list[str]:
    try:
        value = json.loads(args)
    except ValueError:
        problems.append(f"Dockerfile: {where} must use the JSON exec form, got {args}")
        return []
    return [str(v) for v in value]


def _segments(tokens: list[str]) -> list[list[str]]:
    """Shell tokens split into simple commands at ``&&``, ``||``, ``;`` and ``|``."""
    out: list[list[str]] = [[]]
    for token in tokens:
        if token in ("&&", "||", ";", "|"):
            out.append([])
        else:
            out[-1].append(token)
    return out


def _run_commands(ins: list[tuple[str, str]]) -> list[list[str]]:
    """Every simple command of every RUN, as shell words."""
    out: list[list[str]] = []
    for kind, args in ins:
        if kind == "RUN":
            lexer = shlex.shlex(args, posix=True, punctuation_chars=True)
            lexer.whitespace_split = True
            out += [words for words in _segments(list(lexer)) if words]
    return out


def image_user(text: str) -> tuple[str | None, int | None]:
    """The image's final ``USER`` (without its group) and that user's numeric uid: the
    USER itself if numeric, else the ``--uid``/``-u`` of the ``useradd`` that made it."""
    ins = dockerfile_instructions(text)
    users = [a.split(":")[0] for k, a in ins if k == "USER"]
    if not users:
        return None, None
    user = users[-1]
    if user.isdigit():
        return user, int(user)
    for words in _run_commands(ins):
        if words[0] in ("useradd", "adduser") and words[-1] == user:
            for i, word in enumerate(words[:-1]):
                if word in ("--uid", "-u") and words[i + 1].isdigit():
                    return user, int(words[i + 1])
                if word.startswith("--uid=") and word[6:].isdigit():
                    return user, int(word[6:])
    return user, None


def owned_dirs(text: str) -> set[str]:
    """Directories a RUN step creates (``mkdir``) and ``chown``s to the final USER.

    A fresh Docker named volume mounted at one of them starts with its owner and
    mode; mounted at a path the image lacks, it starts root-owned (755).
    """
    ins = dockerfile_instructions(text)
    user, uid = image_user(text)
    names = {n for n in (user, None if uid is None else str(uid)) if n}
    made: set[str] = set()
    owned: set[str] = set()
    for words in _run_commands(ins):
        args = [w for w in words[1:] if not w.startswith("-")]
        if words[0] == "mkdir":
            made.update(a.rstrip("/") for a in args)
        elif words[0] == "chown" and args and args[0].split(":")[0] in names:
            owned.update(a.rstrip("/") for a in args[1:])
    return made & owned


def _check_docker_commands(ins: list[tuple[str, str]], kinds: list[str]) -> list[str]:
    problems: list[str] = []
    if "HEALTHCHECK" not in kinds:
        problems.append("Dockerfile: HEALTHCHECK missing")
    for kind, args in ins:
        if kind == "HEALTHCHECK":
            cmd = _exec_form("HEALTHCHECK CMD", args[args.find("CMD") + 3:].strip(), problems)
            code = cmd[cmd.index("-c") + 1] if "-c" in cmd else ""
            if "/health" not in code:
                problems.append("Dockerfile: HEALTHCHECK must GET /health")
            try:
                compile(code, "HEALTHCHECK", "exec")
            except SyntaxError as exc:
                problems.append(f"Dockerfile: HEALTHCHECK code does not compile: {exc}")
        elif kind == "CMD":
            launch("Dockerfile CMD", _exec_form("CMD", args, problems), {}, problems)
    for words in _run_commands(ins):  # build-time ftrl-ps commands must still parse
        if words[:3] == ["python", "-m", "ftrl_ps"]:
            error = parse_cli(words[3:])
            if error:
                problems.append(f"Dockerfile: RUN {' '.join(words)}: {error}")
    return problems
