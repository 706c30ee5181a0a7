"""The dashboard's pages and actions (aiohttp handlers).

Reads come from the latest snapshot (:mod:`osqueue.inspect.snapshot`); every
read handler first asks :class:`~osqueue.dashboard.security.Access` whether
this session may read, every POST whether it may act (CSRF first, then the
admin login).  An action goes through the broker, re-reads the document so the
next page shows its effect, and redirects (303) with a notice.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any
from urllib.parse import urlencode

from aiohttp import web
from aiohttp.web_request import FileField
from multidict import MultiDictProxy

from osqueue.broker.observe.counters import RECENT_WORKERS_WINDOW_S
from osqueue.dashboard.actions import PAUSE_AVAILABLE
from osqueue.dashboard.board import Board, dashboard_of, page_context, session_of, set_session
from osqueue.dashboard.render import age, segment
from osqueue.dashboard.security import Refused, safe_next
from osqueue.errors import InvalidInput, JobNotFound
from osqueue.inspect.admin import DeadAction
from osqueue.inspect.archive import check_day, check_hour
from osqueue.inspect.jobs import (
    STATUSES,
    JobFilter,
    SegmentedJobs,
    decode_cursor,
    encode_cursor,
    job_dict,
    payload_of,
    preview,
)

PAGE_SIZE = 50


def add_routes(app: web.Application) -> None:
    app.router.add_get("/", overview)
    app.router.add_get("/api/overview", api_overview)
    app.router.add_get("/jobs", jobs)
    app.router.add_get("/jobs/{id}", job)
    app.router.add_post("/jobs/{id}/cancel", cancel)
    app.router.add_get("/dead", dead)
    app.router.add_post("/dead/{action}", dead_action)
    app.router.add_post("/queues/{queue}/{verb}", pause)
    app.router.add_get("/schedules", schedules)
    app.router.add_post("/schedules/{name}/{verb}", pause_schedule)
    app.router.add_get("/archive", archive)
    app.router.add_get("/archive/find", archive_find)
    app.router.add_get("/broker", broker)
    app.router.add_get("/login", login_form)
    app.router.add_post("/login", login)
    app.router.add_post("/logout", logout)


def _html(request: web.Request, template: str, **context: Any) -> web.Response:
    board = dashboard_of(request)
    body = board.renderer.page(template, **context, **page_context(request, session_of(request)))
    return web.Response(text=body, content_type="text/html")


def _readable(request: web.Request) -> Board:
    board = dashboard_of(request)
    board.access.check_read(session_of(request))
    return board


Form = MultiDictProxy[str | bytes | bytearray | FileField]


async def _form_for_action(request: web.Request) -> Form:
    board = dashboard_of(request)
    form = await request.post()
    session = session_of(request)
    board.access.check_action(session, _text(form.get("csrf")), board.broker_address())
    if not session.admin:  # acting with no login (loopback): keep it for its notice
        board.sessions.keep(session)
    return form


def _redirect(location: str) -> web.Response:
    """303 See Other (returned, not raised, so the session cookie rides along)."""
    return web.Response(status=303, headers={"Location": location})


# --------------------------------------------------------------------------- overview


async def _overview_data(board: Board) -> dict[str, Any]:
    snap = await board.source.current()
    now = time.time()
    figures = await board.metrics.figures()
    return {
        "status": snap.status(now),
        "read_at": snap.read_at,
        "series": board.history.last_hour(now).as_json(),
        # per queue, over the last minute this dashboard read
        "rates": board.rates.rates(now),
        "rates_window_s": board.rates.window_s,
        "workers": [
            {
                "worker": w.worker,
                "jobs": w.jobs,
                "queues": list(w.queues),
                "last_seen_age_s": round(w.last_seen_age_s, 3),
                "oldest_heartbeat_age_s": None
                if w.oldest_heartbeat_age_s is None
                else round(w.oldest_heartbeat_age_s, 3),
            }
            for w in snap.workers(now)
        ],
        "commit_rate": board.brokerlog.commit_rate(),
        "metrics": None if figures is None else asdict(figures),
    }


async def overview(request: web.Request) -> web.Response:
    board = _readable(request)
    data = await _overview_data(board)
    return _html(
        request,
        "overview.html",
        data=data,
        now=time.time(),
        history_source=board.history.source,
        poll_ms=int(board.config.poll_s * 1000),
        pause_available=PAUSE_AVAILABLE,
        worker_window=age(RECENT_WORKERS_WINDOW_S),
    )


async def api_overview(request: web.Request) -> web.Response:
    board = _readable(request)
    return web.json_response(await _overview_data(board))


# --------------------------------------------------------------------------- jobs


def _int_arg(request: web.Request, name: str, default: int) -> int:
    text = request.query.get(name, "")
    if not text:
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidInput(f"{text!r} is not a whole number", field=name) from None


def _job_filter(request: web.Request, *, status: str | None = None) -> JobFilter:
    q = request.query
    return JobFilter(
        queue=q.get("queue") or None,
        status=status or q.get("status") or None,
        text=(q.get("q") or "").strip() or None,
    )


async def jobs(request: web.Request) -> web.Response:
    board = _readable(request)
    snap = await board.source.current()
    where = _job_filter(request)
    after_text = request.query.get("after")
    after = decode_cursor(after_text) if after_text else None
    limit = _int_arg(request, "limit", PAGE_SIZE)
    page = await SegmentedJobs(snap.doc, board.source.storage).page(where, after, limit)
    return _html(
        request,
        "jobs.html",
        where=where,
        page=page,
        next_cursor=encode_cursor(page.next_after) if page.next_after else None,
        limit=limit,
        first_page=after is None,
        queues=snap.doc.index.queues(),
        statuses=STATUSES,
        now=time.time(),
    )


async def job(request: web.Request) -> web.Response:
    board = _readable(request)
    snap = await board.source.current()
    job_id = request.match_info["id"]
    found = await SegmentedJobs(snap.doc, board.source.storage).get(job_id)
    if found is None:
        return _html(request, "job_missing.html", job_id=job_id)
    payload = await payload_of(found, board.source.storage)
    return _html(
        request,
        "job.html",
        job=found,
        fields=job_dict(found),
        preview=preview(payload),
        now=time.time(),
    )


async def cancel(request: web.Request) -> web.StreamResponse:
    board = dashboard_of(request)
    await _form_for_action(request)
    job_id = request.match_info["id"]
    (outcome,) = await board.actions.cancel([job_id])
    session = session_of(request)
    if outcome is None:
        session.notify("ok", f"cancelled job {job_id}")
    elif isinstance(outcome, JobNotFound):
        session.notify("error", f"job {job_id} is no longer live (finished or cancelled)")
    elif isinstance(outcome, Exception):
        raise outcome
    await board.source.refresh()
    return _redirect(f"/jobs/{segment(job_id)}")


# --------------------------------------------------------------------------- dead letters


async def dead(request: web.Request) -> web.Response:
    board = _readable(request)
    snap = await board.source.current()
    where = _job_filter(request, status="dead")
    after_text = request.query.get("after")
    after = decode_cursor(after_text) if after_text else None
    page = await SegmentedJobs(snap.doc, board.source.storage).page(where, after, PAGE_SIZE)
    return _html(
        request,
        "dead.html",
        where=where,
        page=page,
        next_cursor=encode_cursor(page.next_after) if page.next_after else None,
        queues=snap.doc.index.queues(),
        now=time.time(),
    )


async def dead_action(request: web.Request) -> web.StreamResponse:
    board = dashboard_of(request)
    try:
        action = DeadAction(request.match_info["action"])
    except ValueError:
        raise web.HTTPNotFound() from None
    form = await _form_for_action(request)
    queue = str(form.get("queue") or "") or None
    session = session_of(request)
    if form.get("scope") == "all":
        ids: list[str] | None = None
        if queue is not None:  # every dead job of one queue: named by id
            snap = await board.source.refresh()
            ids = [j.id for j in snap.doc.jobs.values() if j.status == "dead" and j.queue == queue]
    else:
        ids = [str(i) for i in form.getall("id", [])]
        if not ids:
            session.notify("error", "select at least one dead job first")
            return _redirect(_dead_url(queue))
    count = await board.actions.dead(action, ids) if ids != [] else 0
    verb = "retried" if action is DeadAction.retry else "purged"
    session.notify("ok", f"{verb} {count:,} dead job{'' if count == 1 else 's'}")
    await board.source.refresh()
    return _redirect(_dead_url(queue))


def _dead_url(queue: str | None) -> str:
    return "/dead" + (f"?{urlencode({'queue': queue})}" if queue else "")


async def pause(request: web.Request) -> web.StreamResponse:
    """PAUSE / RESUME a queue (the broker's queue-settings op, through the client)."""
    board = dashboard_of(request)
    verb = request.match_info["verb"]
    if verb not in ("pause", "resume"):
        raise web.HTTPNotFound()
    await _form_for_action(request)
    queue = request.match_info["queue"]
    await board.actions.pause(queue, paused=verb == "pause")
    session_of(request).notify("ok", f"{'paused' if verb == 'pause' else 'resumed'} queue {queue}")
    await board.source.refresh()
    return _redirect("/")


# --------------------------------------------------------------------------- schedules


async def schedules(request: web.Request) -> web.Response:
    board = _readable(request)
    snap = await board.source.current()
    return _html(
        request,
        "schedules.html",
        schedules=snap.schedules(),
        now=time.time(),
        pause_available=PAUSE_AVAILABLE,
    )


async def pause_schedule(request: web.Request) -> web.StreamResponse:
    """PAUSE / RESUME one schedule (put back through the client with ``paused`` set)."""
    board = dashboard_of(request)
    verb = request.match_info["verb"]
    if verb not in ("pause", "resume"):
        raise web.HTTPNotFound()
    await _form_for_action(request)
    name = request.match_info["name"]
    await board.actions.pause_schedule(name, paused=verb == "pause")
    done = "paused" if verb == "pause" else "resumed"
    session_of(request).notify("ok", f"{done} schedule {name}")
    await board.source.refresh()
    return _redirect("/schedules")


# --------------------------------------------------------------------------- archive


async def archive(request: web.Request) -> web.Response:
    board = _readable(request)
    day = request.query.get("day") or None
    hour_text = request.query.get("hour")
    context: dict[str, Any] = {"day": day, "hour": None, "days": [], "objects": [], "page": None}
    if day is None:
        context["days"] = await board.archive.days()
    elif not hour_text:
        context["objects"] = await board.archive.objects_of(check_day(day))
        hours: dict[int, int] = {}
        for obj in context["objects"]:
            hours[obj.hour] = hours.get(obj.hour, 0) + 1
        context["hours"] = dict(sorted(hours.items()))
    else:
        hour = check_hour(_int_arg(request, "hour", 0))
        context["hour"] = hour
        context["page"] = await board.archive.hour(
            check_day(day), hour, offset=_int_arg(request, "offset", 0)
        )
    return _html(request, "archive.html", **context)


async def archive_find(request: web.Request) -> web.Response:
    board = _readable(request)
    job_id = (request.query.get("id") or "").strip()
    day = request.query.get("day") or None
    found = None
    if job_id:
        found = await board.archive.find(job_id, day=check_day(day) if day else None)
    return _html(request, "archive_find.html", job_id=job_id, day=day, found=found)


# --------------------------------------------------------------------------- broker


async def broker(request: web.Request) -> web.Response:
    board = _readable(request)
    snap = await board.source.current()
    now = time.time()
    return _html(
        request,
        "broker.html",
        status=snap.status(now),
        snap=snap,
        tenures=board.brokerlog.tenures(),
        commit_rate=board.brokerlog.commit_rate(),
        rate_window_s=board.brokerlog.rate_window_s,
        figures=await board.metrics.figures(),
        now=now,
    )


# --------------------------------------------------------------------------- login


async def login_form(request: web.Request) -> web.Response:
    session = session_of(request)
    if "logged_out" in request.query and not session.admin:
        session.notify("ok", "logged out")
    return _html(request, "login.html", next=safe_next(request.query.get("next")))


async def login(request: web.Request) -> web.StreamResponse:
    board = dashboard_of(request)
    form = await request.post()
    session = session_of(request)
    board.access.check_csrf(session, _text(form.get("csrf")))
    target = safe_next(_text(form.get("next")))
    if board.access.token is None:
        raise Refused(
            "there is nothing to log in to: this dashboard was started without an admin "
            "token, so actions are disabled (start it with --token-file or OSQUEUE_TOKEN)"
        )
    client = request.remote or "unknown"
    board.logins.check(client)  # 429 while held back: the token is not even compared
    if not board.access.token_matches(_text(form.get("token")) or ""):
        board.logins.failed(client)
        session.notify("error", "that is not the admin token")
        response = _html(request, "login.html", next=target)
        response.set_status(401)
        return response
    board.logins.succeeded(client)
    board.sessions.drop(session.id)
    admin = board.sessions.login()  # a new id: no session fixation
    admin.notify("ok", "logged in: actions are enabled")
    set_session(request, admin)
    return _redirect(target)


async def logout(request: web.Request) -> web.StreamResponse:
    board = dashboard_of(request)
    form = await request.post()
    session = session_of(request)
    board.access.check_csrf(session, _text(form.get("csrf")))
    board.sessions.drop(session.id)
    set_session(request, board.sessions.visitor())
    return _redirect("/login?logged_out=1")


def _text(value: object) -> str | None:
    return value if isinstance(value, str) else None
