"""`gtmcluster config push|pull|history|diff|rollback`: the sync group's shared config.

  push --config FILE --node NAME [--force]
        publish FILE and the files it names (zones and the files they $INCLUDE, region
        lists, CA files, GeoIP databases) to the group through member NAME; exits 0 once
        every member that is connected runs it, 1 with the reasons when it is refused (here:
        a name outside FILE's folder, an inline secret; by NAME, or by a member that cannot
        run it: a change of its own ground, see docs/config-sync.md), or when another push
        of the same generation won
  pull --config FILE --node NAME --dir DIR [--generation N]
        write the group's current bundle (or generation N) out as files under DIR
  history --config FILE --node NAME
        the bundles NAME holds, newest first (the last 20 generations)
  diff GEN_A GEN_B --config FILE --node NAME
        a unified diff of two generations' files
  rollback GEN --config FILE --node NAME [--force]
        publish generation GEN's files again, as a new generation

A push states the generation it was based on (the group's when the push starts, or
--based-on N): if the group has moved on meanwhile, the push is refused with who published
what, unless --force. --config names the member (its API address and token) in every
command; for push it is also what is published.

What answers at the member's address is read as a stranger's (`gtmcluster.cli.nodeapi`):
each answer is checked against the fields read here (`HELD`, `PUBLISHED`, `GROUP`,
`HISTORY`), one that does not fit is the node unreachable (one line, exit 1), and what it
says (publishers, member names, refusal reasons, the bundles' file names and text) is
printed with its control characters escaped (`gtmcluster.cli.terminal`).
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from pathlib import Path
from typing import Any

from gtmcluster.cli.admin import when
from gtmcluster.cli.nodeapi import CliError, Tokens, add_token_argument, get, load_config, member, post_raw, raw
from gtmcluster.cli.shape import ListOf, MapOf, Maybe, Obj
from gtmcluster.cli.terminal import escape
from gtmcluster.config.load import config_value
from gtmcluster.config.model import Member
from gtmcluster.config.problems import ConfigError
from gtmcluster.groupconfig import bundle

#: seconds a push waits for the members to run it
WAIT = 120.0
POLL = 0.1

#: a bundle's header as read here (`groupconfig.bundle.Header.to_json`; `gtmcluster.cli.shape`)
HEADER = Obj({"generation": int, "based_on": int, "publisher": str, "published_at": float, "digest": str})
#: what push and pull read of GET /api/v1/config: the newest bundle the member holds
HELD = Obj({"held": Maybe(HEADER)})
#: the answer to a publication (a push, a rollback)
PUBLISHED = Obj({"published": HEADER, "unchanged": bool})
#: what a push watches of GET /api/v1/config: what each peer runs, or refused and why
MEMBER = Obj(
    {
        "connected": bool,
        "speaks_config_sync": bool,
        "running": Maybe(Obj({"generation": int, "digest": str})),
        "refused": Maybe(Obj({"bundle": Obj({"digest": str}), "reasons": ListOf(str)})),
    }
)
GROUP = Obj({"held": Maybe(HEADER), "members": MapOf(MEMBER)})
#: GET /api/v1/config/history
HISTORY = Obj({"bundles": ListOf(Obj({**HEADER.fields, "size": int, "running": bool}))})


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "config",
        help="the sync group's shared config: push, pull, history, diff, rollback",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )

    def common(q: Any) -> None:
        q.add_argument("--config", "-c", metavar="FILE", help="the group's config (required)")
        q.add_argument("--node", "-n", metavar="NAME", help="the member to ask (required in a group of several)")
        q.add_argument("--json", action="store_true", help="the API's JSON answers")
        add_token_argument(q)

    # the options go before the action or after it (given after, they are not reset by
    # the action's defaults: those are suppressed)
    common(p)
    after = argparse.ArgumentParser(add_help=False, argument_default=argparse.SUPPRESS)
    common(after)
    actions = p.add_subparsers(dest="action", metavar="ACTION", required=True)

    def action(name: str, text: str) -> Any:
        return actions.add_parser(name, help=text, description=f"gtmcluster config {name}: {text}.", parents=[after])

    q = action("push", "publish FILE and the files it names to the group")
    q.add_argument("--force", action="store_true", help="publish even if the group moved on since --based-on")
    q.add_argument("--based-on", type=int, metavar="N", help="the generation this change started from")
    q.add_argument("--wait", type=float, default=WAIT, metavar="SECONDS", help="how long to wait for the members")
    q.set_defaults(run=push)
    q = action("pull", "write the group's bundle out as files")
    q.add_argument("--dir", "-d", required=True, metavar="DIR")
    q.add_argument("--generation", "-g", type=int, metavar="N", help="this generation (default: the newest)")
    q.set_defaults(run=pull)
    q = action("history", "the bundles held, newest first")
    q.set_defaults(run=history)
    q = action("diff", "a unified diff of two generations")
    q.add_argument("first", type=int, metavar="GEN_A")
    q.add_argument("second", type=int, metavar="GEN_B")
    q.set_defaults(run=diff)
    q = action("rollback", "publish an old generation again, as a new one")
    q.add_argument("generation", type=int, metavar="GEN")
    q.add_argument("--force", action="store_true", help="even if the group moved on since --based-on")
    q.add_argument("--based-on", type=int, metavar="N", help="the generation you decided this on")
    q.add_argument("--wait", type=float, default=WAIT, metavar="SECONDS", help="how long to wait for the members")
    q.set_defaults(run=rollback)


def _command(args: argparse.Namespace) -> str:
    return f"gtmcluster config {args.action}"


def _target(args: argparse.Namespace) -> tuple[Member, Tokens]:
    if not args.config:
        raise CliError("--config FILE is required (the group's config: it names the members)")
    config = load_config(args.config)
    return member(config, args.node), Tokens.from_args(config, args)


def run_guarded(args: argparse.Namespace, work: Any) -> int:
    try:
        return int(work(args))
    except CliError as e:
        print(f"{_command(args)}: {e}", file=sys.stderr)
        return 1


def push(args: argparse.Namespace) -> int:
    return run_guarded(args, _push)


def _push(args: argparse.Namespace) -> int:
    m, tokens = _target(args)
    state = get(m, "/api/v1/config", tokens=tokens, fields=HELD)
    held = state["held"] or {}
    based_on = args.based_on if args.based_on is not None else int(held.get("generation", 0))
    try:
        # (read by _target: not parsed again)
        made, raw = bundle.read_and_make(args.config, 1, based_on, m.name, time.time(), parse=config_value)
    except ConfigError as e:
        raise CliError(f"the bundle cannot be made:\n{e}") from None
    problems = bundle.check(made, raw)
    if problems:
        raise CliError("the bundle cannot be published:\n" + "\n".join(str(p) for p in problems))
    target = "/api/v1/config" + ("?force=true" if args.force else "")
    started = time.monotonic()
    answer = post_raw(m, target, bundle.encode(made), tokens, fields=PUBLISHED)
    return _follow(args, m, tokens, answer, started, f"{len(made.files)} files, {made.size:,} bytes")


def rollback(args: argparse.Namespace) -> int:
    return run_guarded(args, _rollback)


def _rollback(args: argparse.Namespace) -> int:
    m, tokens = _target(args)
    body: dict[str, str] = {"force": "true" if args.force else "false"}
    if args.based_on is not None:
        body["based_on"] = str(args.based_on)
    started = time.monotonic()
    answer = post_raw(
        m, f"/api/v1/config/rollback/{args.generation}", json.dumps(body).encode(), tokens, fields=PUBLISHED
    )
    return _follow(args, m, tokens, answer, started, f"the files of generation {args.generation}")


def _follow(args: argparse.Namespace, m: Member, tokens: Tokens, answer: Any, started: float, what: str) -> int:
    """Watch the group take the published bundle; the exit status."""
    published = answer["published"]
    if answer.get("unchanged"):
        if args.json:
            print(json.dumps(answer, indent=1, sort_keys=True))
        else:
            print(f"unchanged: the group holds these files already, as generation {published['generation']}")
        return 0
    generation, digest = published["generation"], published["digest"]
    if not args.json:
        print(
            f"published generation {generation} ({digest[:12]}, {what}) on {m.name}, "
            f"based on generation {published['based_on']}"
        )
    taken: dict[str, float] = {m.name: time.monotonic() - started}
    deadline = time.monotonic() + args.wait
    while True:
        state = get(m, "/api/v1/config", tokens=tokens, fields=GROUP)
        held = state["held"] or {}
        if (held.get("generation"), held.get("digest"), held.get("publisher")) != (
            generation,
            digest,
            published["publisher"],
        ):
            raise CliError(
                f"generation {held.get('generation')} published by {escape(str(held.get('publisher')))} at "
                f"{when(held.get('published_at'))} won over this one (published at the same time, or after): "
                "pull it (`gtmcluster config pull`) and push again"
            )
        refused, pending, away = {}, [], []
        for name, view in sorted(state["members"].items()):
            running = view["running"] or {}
            refusal = view["refused"] or {}
            if running.get("digest") == digest and running.get("generation") == generation:
                taken.setdefault(name, time.monotonic() - started)
            elif refusal and refusal["bundle"]["digest"] == digest:
                refused[name] = refusal["reasons"]
            elif not view["connected"]:
                away.append(name)
            elif not view["speaks_config_sync"]:
                away.append(f"{name} (an older version without config sync)")
            else:
                pending.append(name)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(POLL)
    if args.json:
        print(json.dumps({**answer, "taken": taken, "refused": refused, "pending": pending, "away": away}, indent=1))
    else:
        for name, seconds in sorted(taken.items()):
            print(f"  {escape(name)}: runs it ({seconds:.2f} s)")
        for name, reasons in refused.items():
            print(f"  {escape(name)}: REFUSED, it runs its previous config: " + "; ".join(map(escape, reasons)))
        for name in pending:
            print(f"  {escape(name)}: has not taken it after {args.wait:g} s")
        for name in away:
            print(f"  {escape(name)}: not connected now; it takes it when it connects")
    return 1 if refused or pending else 0


def pull(args: argparse.Namespace) -> int:
    return run_guarded(args, _pull)


def _pull(args: argparse.Namespace) -> int:
    m, tokens = _target(args)
    generation = args.generation
    if generation is None:
        held = get(m, "/api/v1/config", tokens=tokens, fields=HELD)["held"]
        if not held:
            raise CliError(f"{m.name} holds no bundle: nothing was published in this group yet")
        generation = held["generation"]
    got = _bundle(m, tokens, generation)
    try:
        path = bundle.write(got, Path(args.dir))
    except (OSError, bundle.BadBundle) as e:
        raise CliError(f"cannot write under {args.dir}: {escape(str(e))}") from None
    print(
        f"generation {got.generation} ({got.digest[:12]}), published by {escape(got.publisher)} at "
        f"{when(got.published_at)}: {len(got.files)} files written under {args.dir}; the config is {escape(str(path))}"
    )
    return 0


def _bundle(m: Member, tokens: Tokens, generation: int) -> bundle.Bundle:
    data = raw(m, f"/api/v1/config/bundles/{generation}", tokens)
    try:
        return bundle.decode(data)
    except bundle.BadBundle as e:
        raise CliError(f"{m.name} sent a bad bundle for generation {generation}: {escape(str(e))}") from None


def history(args: argparse.Namespace) -> int:
    return run_guarded(args, _history)


def _history(args: argparse.Namespace) -> int:
    m, tokens = _target(args)
    answer = get(m, "/api/v1/config/history", tokens=tokens, fields=HISTORY)
    if args.json:
        print(json.dumps(answer, indent=1, sort_keys=True))
        return 0
    print(f"{'GEN':>5}  {'PUBLISHED':20}  {'BY':16}  {'BASED ON':>8}  {'DIGEST':12}  {'SIZE':>10}")
    for b in answer["bundles"]:
        print(
            f"{b['generation']:>5}  {when(b['published_at']):20}  {escape(b['publisher']):16}  {b['based_on']:>8}  "
            f"{b['digest'][:12]:12}  {b['size']:>10,}{'  (running)' if b['running'] else ''}"
        )
    if not answer["bundles"]:
        print(f"{m.name} holds no bundle: nothing was published in this group yet")
    return 0


def diff(args: argparse.Namespace) -> int:
    return run_guarded(args, _diff)


def _diff(args: argparse.Namespace) -> int:
    m, tokens = _target(args)
    a, b = _bundle(m, tokens, args.first), _bundle(m, tokens, args.second)
    for name in sorted(set(a.files) | set(b.files)):
        before = _lines(a.files.get(name))
        after = _lines(b.files.get(name))
        sys.stdout.writelines(
            difflib.unified_diff(
                before,
                after,
                f"generation {a.generation}/{escape(name)}" if name in a.files else "/dev/null",
                f"generation {b.generation}/{escape(name)}" if name in b.files else "/dev/null",
            )
        )
    return 0


def _lines(data: bytes | None) -> list[str]:
    if data is None:
        return []
    # (a tab is text; a newline ends a line: both kept, every other control escaped)
    text = escape(data.decode("utf-8", errors="replace"), keep="\t\n")
    lines = text.splitlines(keepends=True)
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n\\ No newline at end of file\n"
    return lines
