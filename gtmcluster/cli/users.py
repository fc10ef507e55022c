"""`gtmcluster users`: the identities of the API's users file (``api.users_file``).

``gtmcluster users add NAME --role ROLE --file FILE`` adds an identity with a new bearer
token: the file gets only the token's hash, and the token itself is printed once, alone on
its line (keep it: it is nowhere else). With ``--cert-subject "CN=..."`` or ``--cert-san
KIND:VALUE`` the identity is a client certificate of the operators' CA instead, and no token
is made. ``gtmcluster users list --file FILE`` shows each name, role and way in (never a
hash); ``gtmcluster users remove NAME --file FILE`` takes an identity out.

The file is written whole to a new file beside it (mode 0600, the user's own), synced, and
renamed over it: a reader sees the old file or the new one, never half of one. What is
there already is kept as it is written (comments too); the file is checked as the node
reads it before and after. A running node takes the change on its next reload (SIGHUP,
or ``POST /api/v1/reload``); a token it knew is then checked again.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from cryptography import x509

from gtmcluster.config.source import yamlsrc
from gtmcluster.config.users import ROLES, ApiUser, read_users
from gtmcluster.runtime import files, tokenhash


class UsersError(Exception):
    """A problem to print as it is."""


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "users",
        help="add, list and remove the API's identities (api.users_file)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = p.add_subparsers(dest="users_action", metavar="ACTION", required=True)
    add = actions.add_parser("add", help="add an identity; a token is printed once")
    add.add_argument("name", metavar="NAME")
    add.add_argument("--role", required=True, choices=ROLES, help="what it may do")
    add.add_argument("--file", required=True, type=Path, metavar="USERS_FILE", help="the users file (made if missing)")
    way = add.add_mutually_exclusive_group()
    way.add_argument("--cert-subject", metavar="SUBJECT", help='a client certificate\'s subject ("CN=alice,O=Ops")')
    way.add_argument("--cert-san", metavar="KIND:VALUE", help="a client certificate's SAN (email:alice@ops.example)")
    listing = actions.add_parser("list", help="the identities: name, role, way in")
    listing.add_argument("--file", required=True, type=Path, metavar="USERS_FILE")
    listing.add_argument("--json", action="store_true", help="as JSON")
    remove = actions.add_parser("remove", help="take an identity out")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--file", required=True, type=Path, metavar="USERS_FILE")
    p.set_defaults(run=run)


def run(args: Any) -> int:
    try:
        if args.users_action == "add":
            return add(args.file, args.name, args.role, args.cert_subject, args.cert_san)
        if args.users_action == "list":
            return show(args.file, args.json)
        return remove(args.file, args.name)
    except UsersError as e:
        print(f"gtmcluster users: {e}", file=sys.stderr)
        return 1


def _read(path: Path, missing_ok: bool = False) -> tuple[str, dict[str, ApiUser]]:
    """The text of the users file and its identities; UsersError for any problem."""
    try:
        text = files.read_text(path, files.USERS)
    except FileNotFoundError:
        if missing_ok:
            return "", {}
        raise UsersError(f"{path}: no such file") from None
    except OSError as e:
        raise UsersError(str(e) if isinstance(e, files.Refused) else f"cannot read {path}: {e.strerror or e}") from None
    users, problems = read_users(path)
    if problems:
        raise UsersError("\n".join(str(p) for p in problems))
    return text, dict(users.by_name)


def add(path: Path, name: str, role: str, subject: str | None, san: str | None) -> int:
    text, users = _read(path, missing_ok=True)
    if name in users:
        raise UsersError(f"{path}: {name} is there already (remove it first to give it a new token or role)")
    token = None
    if subject is not None:
        entry = {"role": role, "cert_subject": subject}
    elif san is not None:
        entry = {"role": role, "cert_san": san}
    else:
        token = tokenhash.new_token(name)
        entry = {"role": role, "token_hash": tokenhash.make(token)}
    # a flow mapping on one line; json.dumps writes YAML-safe quoted strings
    line = f"{json.dumps(name)}: {{{', '.join(f'{k}: {json.dumps(v)}' for k, v in entry.items())}}}\n"
    new = text + ("" if not text or text.endswith("\n") else "\n") + line
    _write(path, new)
    try:
        _read(path)
    except UsersError as e:  # the entry itself is wrong (a bad name, subject, SAN): undone
        _write(path, text)
        raise UsersError(f"{name} not added:\n{e}") from None
    if token is not None:
        print(f"added {name} ({role}) to {path}; its token (shown once, keep it):", file=sys.stderr)
        print(token)
    else:
        print(f"added {name} ({role}) to {path}", file=sys.stderr)
    return 0


def show(path: Path, as_json: bool) -> int:
    _, users = _read(path)
    rows = [{"name": u.name, "role": u.role, "way": _way(u)} for u in users.values()]
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max([4, *(len(r["name"]) for r in rows)])
    print(f"{'NAME':<{width}}  {'ROLE':<8}  WAY IN")
    for r in rows:
        print(f"{r['name']:<{width}}  {r['role']:<8}  {r['way']}")
    return 0


def remove(path: Path, name: str) -> int:
    text, users = _read(path)
    if name not in users:
        raise UsersError(f"{path}: no identity named {name}")
    _, lines, _ = yamlsrc.load(str(path), text)
    starts = sorted(line for at, line in lines.items() if len(at) == 1)
    first = lines[(name,)]
    after = next((line for line in starts if line > first), None)
    kept = text.splitlines(keepends=True)
    del kept[first - 1 : (after - 1) if after is not None else len(kept)]
    _write(path, "".join(kept))
    _read(path)
    print(f"removed {name} from {path}", file=sys.stderr)
    return 0


def _way(u: ApiUser) -> str:
    if u.token_hash is not None:
        return "token"
    if u.cert_subject is not None:
        name = x509.Name(
            [x509.NameAttribute(x509.ObjectIdentifier(oid), value) for oid, value in sorted(u.cert_subject)]
        )
        return f"certificate subject {name.rfc4514_string()}"
    return f"certificate SAN {u.cert_san}"


def _write(path: Path, text: str) -> None:
    """*text* as the file at *path*, atomically, mode 0600."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        fd, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    except OSError as e:
        raise UsersError(f"cannot write in {directory}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            out.write(text.encode())
            out.flush()
            os.fsync(out.fileno())
        os.replace(temporary, path)
        directory_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(directory_fd)
        finally:
            os.close(directory_fd)
    except OSError as e:
        Path(temporary).unlink(missing_ok=True)
        raise UsersError(f"cannot write {path}: {e.strerror or e}") from None
