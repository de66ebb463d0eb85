"""piw for Python: a client of the piw workflow host over libpiw (the C ABI), through ctypes.

    import piw

    with piw.Client() as client:                 # starts a host when none runs
        run_id = client.start("review.workflow.mjs", input={"task": "..."})
        for event in client.follow(run_id):      # events in commit order, until the run parks or ends
            print(event["seq"], event["event_kind"], event["status"])
        run = client.wait(run_id)                # the run's record once it is final

The installed package carries libpiw and the host binaries (``piw``, ``piw-json-worker``), so
nothing else is needed to run a host; ``PIW_HOME`` selects the installation as for every piw
client, ``PIW_HOST_BIN`` (or ``Client(host_bin=...)``) another host binary, ``PIW_LIB`` another
libpiw. Every failure is a :class:`PiwError` (a subclass per kind: :class:`Rejected` with the
host's rejection ``code``, :class:`NotFound`, :class:`Timeout`, :class:`Disconnected`,
:class:`Closed`, :class:`HostNotReady`). The protocol is docs/WORKFLOW_SERVER.md of piw.
"""

from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path
from typing import Any, Iterator, Optional

__all__ = [
    "Client", "Subscription", "is_final", "shutdown",
    "PiwError", "Rejected", "NotFound", "Timeout", "Disconnected", "Closed", "HostNotReady",
]

_LIB_DIR = Path(__file__).resolve().parent / "_lib"

# piw_status values (include/piw.h).
_OK, _CLOSED, _REJECTED, _TIMEOUT, _DISCONNECTED, _CONNECT_FAILED, _HOST_NOT_READY = 0, 4, 6, 7, 8, 9, 10
_END = 16
_WAIT_UNTIL_PARKED = 1


class PiwError(Exception):
    """A failed call: ``status`` (the library's status name), ``code`` (a stable string: the
    host's rejection code, such as ``not_found``, or the library's, such as ``timeout``),
    ``message`` and ``details`` (a dict or None)."""

    def __init__(self, status: str, code: str, message: str, details: Any = None):
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details


class Rejected(PiwError):
    """The host refused the request; this attempt committed nothing (after
    ``host_shutting_down`` it may have: resend with the same request id). ``code`` says why."""


class NotFound(Rejected):
    """No such run, decision or interaction (``code == "not_found"``)."""


class Timeout(PiwError):
    """No answer in time. For a command, the host may still apply it."""


class Disconnected(PiwError):
    """The connection to the host ended; make a new client."""


class Closed(PiwError):
    """The client (or subscription) was closed."""


class HostNotReady(PiwError):
    """No host could be started or reached; the message says why (with its log's end)."""


_lib: Optional[ctypes.CDLL] = None


def _load() -> ctypes.CDLL:
    global _lib
    if _lib is not None:
        return _lib
    path = os.environ.get("PIW_LIB") or str(_LIB_DIR / "libpiw.so")
    lib = ctypes.CDLL(path)
    c_str, c_out, vp = ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p
    for name, args, ret in [
        ("piw_string_free", [vp], None),
        ("piw_status_name", [ctypes.c_int], c_str),
        ("piw_last_error_message", [], c_str),
        ("piw_last_error_code", [], c_str),
        ("piw_last_error_details", [], c_str),
        ("piw_connect", [c_str, c_out], ctypes.c_int),
        ("piw_client_call", [vp, c_str, c_str, c_str, ctypes.c_int64, c_out], ctypes.c_int),
        ("piw_client_close", [vp], ctypes.c_int),
        ("piw_subscribe", [vp, c_str, c_out], ctypes.c_int),
        ("piw_subscription_next", [vp, ctypes.c_int64, c_out], ctypes.c_int),
        ("piw_subscription_fd", [vp, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        ("piw_subscription_close", [vp], ctypes.c_int),
        ("piw_run_status_is_final", [c_str], ctypes.c_int),
        ("piw_wait_run", [vp, c_str, ctypes.c_uint32, ctypes.c_int64, c_out], ctypes.c_int),
        ("piw_shutdown", [], ctypes.c_int),
    ]:
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ret
    _lib = lib
    return lib


def _error(status: int) -> PiwError:
    lib = _load()
    code = (lib.piw_last_error_code() or b"").decode()
    message = (lib.piw_last_error_message() or b"").decode()
    details = lib.piw_last_error_details()
    details = json.loads(details) if details else None
    name = (lib.piw_status_name(status) or b"unknown").decode()
    if status == _REJECTED:
        cls = NotFound if code == "not_found" else Rejected
    else:
        cls = {_TIMEOUT: Timeout, _DISCONNECTED: Disconnected, _CLOSED: Closed,
               _HOST_NOT_READY: HostNotReady, _CONNECT_FAILED: HostNotReady}.get(status, PiwError)
    return cls(name, code, message, details)


def _check(status: int) -> None:
    if status != _OK:
        raise _error(status)


def _take(out: ctypes.c_void_p) -> str:
    text = ctypes.string_at(out.value).decode()
    _load().piw_string_free(out)
    return text


def _enc(value: Any) -> Optional[bytes]:
    return None if value is None else json.dumps(value).encode()


def _ms(seconds: Optional[float]) -> int:
    return -1 if seconds is None else max(0, int(seconds * 1000))


def is_final(status: str) -> bool:
    """Whether a run status is final (``completed``, ``failed``, ``cancelled``, ``timed_out``):
    libpiw's one list, never a copy."""
    return bool(_load().piw_run_status_is_final(status.encode()))


def shutdown() -> None:
    """Closes every client and subscription and stops libpiw's I/O thread (it starts again at
    the next connect)."""
    _check(_load().piw_shutdown())


class Subscription:
    """Events of a run or a session, in commit order. Iterate it, or call :meth:`next`;
    :meth:`fileno` is readable exactly while an event waits (for ``select``/``selectors``)."""

    def __init__(self, client: "Client", handle: ctypes.c_void_p, stop_when=None):
        self._lib, self._handle, self._stop_when = client._lib, handle, stop_when
        fd = ctypes.c_int(-1)
        _check(self._lib.piw_subscription_fd(handle, ctypes.byref(fd)))
        self._fd = fd.value

    def fileno(self) -> int:
        return self._fd

    def next(self, timeout: Optional[float] = None) -> Optional[dict]:
        """The next event, or None when none came within ``timeout`` seconds (None: wait)."""
        out = ctypes.c_void_p()
        status = self._lib.piw_subscription_next(self._handle, _ms(timeout), ctypes.byref(out))
        if status == _TIMEOUT:
            return None
        if status == _END:
            raise StopIteration
        _check(status)
        return json.loads(_take(out))

    def __iter__(self) -> Iterator[dict]:
        while True:
            try:
                event = self.next()
            except StopIteration:
                return
            yield event
            if self._stop_when and self._stop_when(event):
                return

    def close(self) -> None:
        """Ends the subscription; closing twice is fine. The handle stays a number that
        libpiw knows as closed, so a later call raises :class:`Closed`."""
        self._lib.piw_subscription_close(self._handle)

    def __enter__(self) -> "Subscription":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class Client:
    """A connection to the host of ``home`` (default ``$PIW_HOME``, else ``~/.pi/agent/piw``),
    started when none runs (``start=False``: only connect). Thread safe: calls from several
    threads share the one connection."""

    def __init__(self, home: Optional[str] = None, *, host_bin: Optional[str] = None,
                 start: bool = True, host_env: Optional[dict] = None):
        self._lib = _load()
        options = {"home": home, "host_bin": host_bin, "start": start, "host_env": host_env}
        options = {k: v for k, v in options.items() if v is not None}
        self._handle = ctypes.c_void_p()
        _check(self._lib.piw_connect(_enc(options), ctypes.byref(self._handle)))

    # -- the protocol ---------------------------------------------------------------------

    def call(self, kind: str, envelope: Optional[dict] = None, payload: Any = None,
             timeout: Optional[float] = 30.0) -> dict:
        """Sends one request of the protocol; returns its receipt ``{revision, replayed, body}``.
        Resend with the same ``envelope["request_id"]`` to learn the outcome of a command whose
        answer did not come: the host replays the receipt."""
        out = ctypes.c_void_p()
        _check(self._lib.piw_client_call(self._handle, kind.encode(), _enc(envelope),
                                         _enc(payload), _ms(timeout), ctypes.byref(out)))
        return json.loads(_take(out))

    # -- runs -----------------------------------------------------------------------------

    def start(self, workflow: str, input: Any = None, *, session_id: Optional[str] = None,
              project_dir: Optional[str] = None, idempotency_key: Optional[str] = None) -> str:
        """Starts a run of ``workflow`` (a path; relative to ``project_dir``, default the
        current directory) and returns its id. With ``idempotency_key`` (1 to 128
        characters) at most one run starts for the key: the same start again returns the first
        run's id; the key with another workflow, input or directory is :class:`Rejected`
        (``idempotency_conflict``)."""
        project_dir = os.path.abspath(project_dir or os.getcwd())
        payload = {"workflow_file": os.path.join(project_dir, workflow), "input": input,
                   "project_dir": project_dir}
        if session_id is not None:
            payload["session_id"] = session_id
        envelope = {"idempotency_key": idempotency_key} if idempotency_key is not None else None
        return self.call("run.start", envelope, payload)["body"]["run_id"]

    def status(self, run_id: str) -> dict:
        """The run's status: ``run``, ``attempts``, ``decisions``, ``interactions``, ``effects``,
        ``last_child``."""
        return self.call("run.status", {"run_id": run_id})["body"]

    def runs(self, *, limit: Optional[int] = None, session_id: Optional[str] = None,
             unfinished: Optional[bool] = None, statuses: Optional[list] = None,
             cursor: Optional[str] = None) -> list:
        """One page of runs, newest first (``limit``, default 100; fewer when their records do
        not fit one reply), after ``cursor`` (a page's ``next_cursor``) when given."""
        return self.runs_page(limit=limit, session_id=session_id, unfinished=unfinished,
                              statuses=statuses, cursor=cursor)["runs"]

    def runs_page(self, *, limit: Optional[int] = None, session_id: Optional[str] = None,
                  unfinished: Optional[bool] = None, statuses: Optional[list] = None,
                  cursor: Optional[str] = None) -> dict:
        """``runs`` with ``more`` and ``next_cursor``: pass ``next_cursor`` back as ``cursor``
        (same filters) until ``more`` is false."""
        payload = {k: v for k, v in {"limit": limit, "session_id": session_id,
                                     "unfinished": unfinished, "statuses": statuses,
                                     "cursor": cursor}.items()
                   if v is not None}
        return self.call("run.list", payload=payload)["body"]

    def all_runs(self, *, limit: Optional[int] = None, session_id: Optional[str] = None,
                 unfinished: Optional[bool] = None,
                 statuses: Optional[list] = None) -> Iterator[dict]:
        """Every run of the filters, newest first, a page (of up to ``limit``) at a time: each
        run that existed when it began exactly once, whatever starts or ends meanwhile."""
        cursor = None
        while True:
            page = self.runs_page(limit=limit, session_id=session_id, unfinished=unfinished,
                                  statuses=statuses, cursor=cursor)
            yield from page["runs"]
            if not page.get("more") or page.get("next_cursor") is None:
                return
            cursor = page["next_cursor"]

    def pause(self, run_id: str) -> dict:
        return self.call("run.pause", {"run_id": run_id})["body"]

    def resume(self, run_id: str) -> dict:
        return self.call("run.resume", {"run_id": run_id})["body"]

    def cancel(self, run_id: str, reason: Optional[str] = None) -> dict:
        payload = {"reason": reason} if reason is not None else {}
        return self.call("run.cancel", {"run_id": run_id}, payload)["body"]

    def follow(self, run_id: Optional[str] = None, *, session_id: Optional[str] = None,
               until_parked: bool = True) -> Subscription:
        """A subscription to a run's (or a session's) events committed from now on, in order
        and without a gap (what happened before is in :meth:`status`; to see a run's every
        event, follow its session before :meth:`start`). Iterating a run's subscription ends
        after the event that ends the run or, with ``until_parked``, leaves it waiting or in
        review."""
        if (run_id is None) == (session_id is None):
            raise ValueError("follow takes a run_id or a session_id")
        filter_ = {"run_id": run_id} if run_id is not None else {"session_id": session_id}
        handle = ctypes.c_void_p()
        _check(self._lib.piw_subscribe(self._handle, _enc(filter_), ctypes.byref(handle)))
        stop = None
        if run_id is not None:
            def stop(event):
                return is_final(event["status"]) or (
                    until_parked and event["status"] in ("waiting", "review"))
        return Subscription(self, handle, stop)

    def wait(self, run_id: str, *, until_parked: bool = False,
             timeout: Optional[float] = None) -> dict:
        """The run's record once it is final (or, with ``until_parked``, once it is parked: it
        waits on a request, a pending checkpoint, decision or interaction that :meth:`status`
        lists; waits paused; or is in review). A run asleep on a durable timer (``waiting`` with
        ``wake_at`` set: a ``wait`` node) is not parked: it goes on by itself, so the wait goes
        on too. :class:`Timeout` when ``timeout`` seconds pass first (the run goes on)."""
        out = ctypes.c_void_p()
        flags = _WAIT_UNTIL_PARKED if until_parked else 0
        _check(self._lib.piw_wait_run(self._handle, run_id.encode(), flags, _ms(timeout),
                                      ctypes.byref(out)))
        return json.loads(_take(out))

    # -- answering --------------------------------------------------------------------------

    def _pending(self, run_id: str, records: str, kind: Optional[str], wanted: Optional[str],
                 id_field: str) -> dict:
        body = self.status(run_id)
        open_ = [r for r in body[records]
                 if r["status"] == "pending" and (kind is None or r["kind"] == kind)]
        if wanted is not None:
            open_ = [r for r in open_ if r[id_field] == wanted]
        if not open_:
            what = f"pending {kind or records[:-1]}" + (f" {wanted}" if wanted else "")
            state = body["run"]["status"]
            hint = ("; wait(run_id, until_parked=True) returns once it asks"
                    if state in ("queued", "running") else "")
            raise NotFound("rejected", "not_found",
                           f"run {run_id} has no {what} (the run is {state}){hint}")
        return open_[0]

    def answer(self, run_id: str, answer: Any, *, decision_id: Optional[str] = None) -> dict:
        """Answers the run's ordinary checkpoint (the pending one, or ``decision_id``) as a
        person (``answered_by: person``, as ``piw run answer`` does: a person at a script is a
        person)."""
        decision = self._pending(run_id, "decisions", "checkpoint", decision_id, "decision_id")
        # `decision.answer` takes checkpoints too, and records a person's answer.
        return self.call("decision.answer", {"run_id": run_id},
                         {"decision_id": decision["decision_id"], "answer": answer})["body"]

    def decide(self, run_id: str, choice: str, text: Optional[str] = None, *,
               decision_id: Optional[str] = None) -> dict:
        """A person's answer to the run's protected human decision: a choice's id, with the
        text the choice collects. A choice the decision does not offer is :class:`Rejected`
        (``malformed``, the choices in ``details``)."""
        decision = self._pending(run_id, "decisions", "human_decision", decision_id,
                                 "decision_id")
        answer = {"choice": choice}
        if text is not None:
            answer["text"] = text
        return self.call("decision.answer", {"run_id": run_id},
                         {"decision_id": decision["decision_id"], "answer": answer})["body"]

    def submit(self, run_id: str, result: Any, *, interaction_id: Optional[str] = None) -> dict:
        """Submits ``result`` for the run's interactive step (the pending one, or
        ``interaction_id``); the workflow's ``validate`` judges it (see :meth:`wait`, or the
        interaction's ``last_submission`` in :meth:`status`)."""
        step = self._pending(run_id, "interactions", None, interaction_id, "interaction_id")
        envelope = {"run_id": run_id, "node_id": step["node_id"], "attempt_id": step["attempt_id"]}
        return self.call("interaction.submit", envelope,
                         {"interaction_id": step["interaction_id"], "result": result})["body"]

    # -- lifetime ---------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; closing twice is fine, a later call raises :class:`Closed`."""
        self._lib.piw_client_close(self._handle)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
