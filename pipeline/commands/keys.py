"""`cryptowire keys create|list|revoke|rotate|set-plan` and `cryptowire usage`: access keys and their metered usage.

Everything goes through the ``accounts`` package (the same store the API uses: SQLite under the data home, or
Postgres with CRYPTOWIRE_DATABASE_URL); never through ``api``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import typer

from accounts.apis import APIS  # a module without imports: keeps the CLI start light
from accounts.keys import ROTATION_GRACE_SECONDS  # stdlib only, as apis
from pipeline.commands.output import emit_json, fail, json_option
from pipeline.timestamps import iso_utc

keys_app = typer.Typer(
    help="Access keys: create (shown once), list, revoke, rotate, set-plan. Only a hash of each key is stored.",
    no_args_is_help=True,
    rich_markup_mode=None,  # Click's help, as pipeline/cli.py
)


def _settings() -> Any:
    from warehouse.config import get_settings

    return get_settings()


@contextmanager
def _store_errors() -> Iterator[None]:
    """The store's failures as one line: a bad or unreachable CRYPTOWIRE_DATABASE_URL, Postgres gone meanwhile."""
    import sqlite3

    from accounts.sqlite import cannot_use
    from accounts.store import StoreConfigError, StoreUnavailable

    try:
        yield
    except StoreConfigError as exc:
        fail(str(exc))
    except sqlite3.Error as exc:  # the data home's keys database, once open: a full or read-only disk
        fail(cannot_use(_settings().platform_db, exc))
    except StoreUnavailable as exc:
        fail(f"{exc}; check that Postgres is running and CRYPTOWIRE_DATABASE_URL points at it")


HOME_HINT = ("point CRYPTOWIRE_HOME at your data home (the default, ./.cryptowire, is relative to the current "
             "directory), or create the first key with `cryptowire keys create`, which starts one there")


def _missing_home(settings: Any) -> str | None:
    """``no data home at <path>`` when the keys would live in a data home that does not exist (SQLite under it;
    with CRYPTOWIRE_DATABASE_URL they live in Postgres), else None. Opening the store there would create it and
    its ``platform.sqlite``, and answer "no keys yet": run from another directory, the default ``./.cryptowire``
    looked as if the keys were lost. Only ``keys create`` starts a data home."""
    if settings.database_url or settings.home.is_dir():
        return None
    return f"no data home at {settings.home.resolve()}"


def _plans(settings: Any) -> dict[str, Any]:
    from accounts import PlansError, load_plans

    try:
        return load_plans(settings.plans_file)
    except PlansError as exc:
        fail(str(exc))


def _no_keys_here(settings: Any, as_json: bool) -> bool:
    """For the commands that list (``keys list``, ``usage``): on a data home that does not exist, say so, as
    ``status`` does, create nothing and return True (the plans are still checked: a bad setting is said first).
    Under --json stdout gets the empty list, the note goes to stderr."""
    missing = _missing_home(settings)
    if missing is None:
        return False
    _plans(settings)
    note = f"{missing}, so no keys yet: {HOME_HINT}"
    if as_json:
        emit_json([])
        typer.echo(note, err=True)
    else:
        typer.echo(note)
    return True


def _known_plan(plan: str, plans: dict[str, Any], hint: str) -> str:
    """``plan`` as the plans name it; one they do not offer is a mistake in the command line (exit 2, usage)."""
    plan = plan.strip().lower()
    if plan not in plans:
        raise typer.BadParameter(f"unknown plan {plan!r}: the plans offered are {', '.join(plans)}", param_hint=hint)
    return plan


def _store_and_plans(missing: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The store and the plans in force. ``missing`` (what the command cannot do without keys): the command reads
    or changes existing keys, so a data home that does not exist is an error, not created (``_missing_home``)."""
    from accounts import open_synced_store

    settings = _settings()
    plans = _plans(settings)
    if missing is not None and (no_home := _missing_home(settings)) is not None:
        fail(f"{no_home}, so {missing}: {HOME_HINT}")
    with _store_errors():
        store = open_synced_store(settings, plans.values())
    return store, plans


def _apis(raw: str) -> list[str]:
    apis = [a.strip().lower() for a in raw.split(",") if a.strip()]
    unknown = [a for a in apis if a not in APIS]
    if unknown or not apis:
        raise typer.BadParameter(f"a comma-separated list of {', '.join(APIS)} (got {raw!r})", param_hint="--apis")
    return list(dict.fromkeys(apis))


def _columns(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    """Left-aligned columns as wide as their widest cell, under a header line."""
    widths = [max(len(cell) for cell in col) for col in zip(header, *rows, strict=True)]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in (header, *rows)]


def _show_new_key(data: dict[str, Any], as_json: bool, what: str) -> None:
    if as_json:
        emit_json(data)
        return
    typer.echo(f"{what} key {data['id']} (plan {data['plan']}, APIs {','.join(data['apis'])}):")
    typer.echo(f"  {data['key']}")
    typer.secho("Store it now: it is shown only this once (only its hash is kept).", fg=typer.colors.YELLOW)


@keys_app.command("create")
def create(
    plan: str = typer.Option(..., "--plan", help="Plan name from plans.yaml: free, basic, pro, enterprise."),
    name: str = typer.Option(..., "--name", help="Who or what the key is for (shown in `keys list`)."),
    apis: str = typer.Option(",".join(APIS), "--apis", help="APIs the key may call, comma-separated."),
    as_json: bool = json_option(help='Print {"id", "key", "plan", "apis"} as JSON.'),
) -> None:
    """Create a key and print it once."""
    chosen = _apis(apis)
    if not name.strip():
        fail("--name must not be empty: say who or what the key is for")
    store, plans = _store_and_plans()
    try:
        plan = _known_plan(plan, plans, "--plan")
    except typer.BadParameter:
        store.close()
        raise
    try:
        with _store_errors():
            key_id, key = store.create_key(name.strip(), plan, chosen)
    finally:
        store.close()
    _show_new_key({"id": key_id, "key": key, "plan": plan, "apis": chosen}, as_json, "Created")


@keys_app.command("list")
def list_keys(as_json: bool = json_option(help="Print the keys as JSON.")) -> None:
    """List keys: id, name, plan, APIs, status and the display form (prefix…last four) of live secrets."""
    if _no_keys_here(_settings(), as_json):
        return
    store, _ = _store_and_plans()
    try:
        with _store_errors():
            rows = store.keys()
    finally:
        store.close()
    for r in rows:
        r["createdAt"], r["revokedAt"] = iso_utc(r["createdAt"]), iso_utc(r["revokedAt"])
        if r["status"] == "revoked":  # the store lists unexpired secrets; a revoked key's no longer work
            r["secrets"] = []
        for s in r["secrets"]:
            s["expiresAt"] = iso_utc(s["expiresAt"])
    if as_json:
        emit_json(rows)
        return
    if not rows:
        typer.echo("no keys yet: create one with `cryptowire keys create --plan free --name NAME`")
        return
    table = [
        (r["id"], r["status"], r["plan"], ",".join(r["apis"]), ", ".join(
            s["display"] + (f" (expires {s['expiresAt']})" if s["expiresAt"] else "") for s in r["secrets"]
        ) or "-", r["name"])
        for r in rows
    ]
    for line in _columns(("id", "status", "plan", "apis", "live secrets", "name"), table):
        typer.echo(line)


@keys_app.command("revoke")
def revoke(
    key_id: str = typer.Argument(..., metavar="ID", help="Key id from `keys list`."),
    as_json: bool = json_option(help='Print {"id", "status", "revokedAt", "alreadyRevoked"}.'),
) -> None:
    """Revoke a key (all its secrets). A running API stops accepting it within about a second."""
    store, _ = _store_and_plans(f"no key {key_id!r} to revoke")
    try:
        with _store_errors():
            before = store.keys(key_id)
            if not before:
                fail(f"no key with id {key_id!r}: `cryptowire keys list` shows the ids")
            store.revoke_key(key_id)  # keeps the first revocation time
            after = store.keys(key_id)[0]
    finally:
        store.close()
    already = before[0]["status"] == "revoked"
    data = {"id": key_id, "status": "revoked", "revokedAt": iso_utc(after["revokedAt"]), "alreadyRevoked": already}
    if as_json:
        emit_json(data)
    elif already:
        typer.echo(f"{key_id} was already revoked (at {data['revokedAt']}); nothing changed")
    else:
        typer.echo(f"revoked {key_id}; a running API refuses it within about a second")


MAX_GRACE_HOURS = 720.0  # 30 days: long enough to move any client, short enough that an old key surely ends


def _check_grace(value: float) -> float:
    """--grace-hours: a finite number of hours from 0 to ``MAX_GRACE_HOURS``, refused as a usage error (exit 2)
    before anything is written (a huge or infinite one left an old secret that never expires)."""
    if not 0.0 <= value <= MAX_GRACE_HOURS:  # also NaN, which compares false
        raise typer.BadParameter(
            f"must be a number of hours from 0 to {MAX_GRACE_HOURS:g} (30 days) (got {value:g}); "
            "0 stops the previous key at once"
        )
    return value


@keys_app.command("rotate")
def rotate(
    key_id: str = typer.Argument(..., metavar="ID", help="Key id from `keys list`."),
    grace_hours: float = typer.Option(
        ROTATION_GRACE_SECONDS / 3600, "--grace-hours", callback=_check_grace,
        help=f"How long the previous key keeps working, 0 to {MAX_GRACE_HOURS:g} hours (0: stops at once).",
    ),
    as_json: bool = json_option(help='Print {"id", "key", "plan", "apis"} as JSON.'),
) -> None:
    """Issue a new key for the same id, plan, APIs and usage; the previous key works for the grace period."""
    from accounts.store import KeyNotFound

    store, _ = _store_and_plans(f"no key {key_id!r} to rotate")
    try:
        with _store_errors():
            key = store.rotate_key(key_id, grace_hours * 3600)
            row = store.keys(key_id)[0]
    except KeyNotFound:
        fail(f"no active key with id {key_id!r}: `cryptowire keys list` shows the ids (revoked keys cannot be "
             "rotated)")
    finally:
        store.close()
    _show_new_key({"id": key_id, "key": key, "plan": row["plan"], "apis": row["apis"]}, as_json, "Rotated")
    if not as_json:
        if grace_hours:
            typer.echo(f"The previous key keeps working until {iso_utc(time.time() + grace_hours * 3600)}.")
        else:
            typer.echo("The previous key stopped working now.")


@keys_app.command("set-plan")
def set_plan(
    key_id: str = typer.Argument(..., metavar="ID", help="Key id from `keys list`."),
    plan: str = typer.Argument(..., metavar="PLAN", help="A plan in force (plans.yaml or CRYPTOWIRE_PLANS_FILE)."),
    as_json: bool = json_option(help='Print {"id", "plan", "previousPlan"} as JSON.'),
) -> None:
    """Move a key to another plan offered by the plans in force.

    Its id, APIs and today's usage stay. A running API applies it within about a second (keys are cached 1 s).
    """
    from accounts.store import KeyNotFound

    store, plans = _store_and_plans(f"no key {key_id!r} to move")
    try:
        plan = _known_plan(plan, plans, "PLAN")
        with _store_errors():
            previous = store.set_plan(key_id, plan)
    except KeyNotFound:
        fail(f"no active key with id {key_id!r}: `cryptowire keys list` shows the ids (revoked keys cannot be "
             "moved)")
    finally:
        store.close()
    if as_json:
        emit_json({"id": key_id, "plan": plan, "previousPlan": previous})
    elif previous == plan:
        typer.echo(f"{key_id} is already on plan {plan}; nothing changed")
    else:
        typer.echo(f"moved {key_id} from plan {previous} to {plan}; a running API applies it within about a second")


def usage(
    key_id: str | None = typer.Argument(None, metavar="ID", help="Key id (default: every key)."),
    days: int = typer.Option(7, "--days", min=1, max=90, help="UTC days to show, ending today."),
    as_json: bool = json_option(help="Print the same JSON as GET /api/usage/{accessKey}."),
) -> None:
    """CU and requests per UTC day and per API, with today's allowance."""
    from accounts import PlansError, build_access

    settings = _settings()
    if key_id:
        if (missing := _missing_home(settings)) is not None:
            _plans(settings)
            fail(f"{missing}, so no key {key_id!r}: {HOME_HINT}")
    elif _no_keys_here(settings, as_json):
        return
    # The one-line error below says what failed; metering's own warning for server logs would repeat it.
    logging.getLogger("accounts").setLevel(logging.ERROR)
    from pipeline.commands.serve import check_redis_scheme

    check_redis_scheme(settings)  # as `serve` says it, before redis-py raises on it
    try:
        with _store_errors():
            access = build_access(settings)
    except PlansError as exc:
        fail(str(exc))

    async def reports() -> list[dict[str, Any]]:
        try:
            ids = [key_id] if key_id else [k["id"] for k in access.store.keys()]
            return [await access.report(i, days) for i in ids]
        finally:
            await access.close()

    from accounts.errors import ApiError

    try:
        found = asyncio.run(reports())
    except LookupError:
        fail(f"no key with id {key_id!r}: `cryptowire keys list` shows the ids")
    except ApiError as exc:  # e.g. the configured Redis or Postgres cannot be reached
        fail(f"{exc.message} (check CRYPTOWIRE_DATABASE_URL and CRYPTOWIRE_REDIS_URL)")
    if as_json:
        emit_json(found[0] if key_id else found)
        return
    if not found:
        typer.echo("no keys yet: create one with `cryptowire keys create --plan free --name NAME`")
    for rep in found:
        today = rep["today"] or {}
        typer.echo(f"{rep['id']}  {rep['name']}  plan {rep['plan']}  ({rep['status']})")
        if today:
            typer.echo(f"  today: {today['cuUsedToday']:,} of {today['cuLimit']:,} CU used, "
                       f"{today['cuRemainingToday']:,} left; resets {today['resetAt']}")
        elif rep["plan"] not in access.plans:
            typer.echo(f"  today: no allowance: plan {rep['plan']!r} is not in the plans file, so the API refuses "
                       f"this key; move it with `cryptowire keys set-plan {rep['id']} PLAN`")
        typer.echo(f"  {'date':<10}  {'CU':>14}  {'requests':>9}  " + "  ".join(f"{a + ' CU':>12}" for a in APIS))
        for d in rep["days"]:
            per_api = "  ".join(f"{d['apis'][a]['cu']:>12,}" for a in APIS)
            typer.echo(f"  {d['date']:<10}  {d['cu']:>14,}  {d['requests']:>9,}  {per_api}")


def register(app: typer.Typer) -> None:
    app.add_typer(keys_app, name="keys")
    app.command("usage")(usage)
