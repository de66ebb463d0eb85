#!/usr/bin/env python3
"""A piw client in Python over ctypes and libpiw (no compiled extension, standard library only).

    PIW_LIB=target/release/libpiw.so python3 examples/python/piw_client.py WORKFLOW_FILE [INPUT_JSON]

Starts a workflow in a session of its own (subscribed first, so no event is missed), follows
its events with select.poll on the subscription's file descriptor, prints the result, and then
shows a typed rejection: resuming the finished run raises PiwError with code
"invalid_transition". Output lines: `run ID`, `event SEQ KIND STATUS`, `status STATUS REVISION`,
`result JSON`, `rejected CODE REJECTION_ENUM MESSAGE`.
"""

import ctypes
import ctypes.util
import json
import os
import select
import sys

# Values of piw_status and piw_rejection_code in include/piw.h.
STATUS_OK = 0
STATUS_REJECTED = 6
STATUS_TIMEOUT = 7
STATUS_END = 16
REJECTION_CODES = {
    0: "none", 1: "malformed", 2: "unsupported_protocol", 3: "payload_too_large",
    4: "unauthorized", 5: "not_found", 6: "invalid_transition", 7: "stale_revision",
    8: "stale_generation", 9: "stale_attempt", 10: "claim_lost", 11: "idempotency_conflict",
    12: "effect_conflict", 13: "effect_uncertain", 14: "host_shutting_down",
    15: "subscriber_lagged", 16: "internal", 17: "pi_unusable", 255: "unknown",
}
WAIT_UNTIL_PARKED = 1


class PiwError(Exception):
    """A failed libpiw call: `status` (piw_status), `code` (stable string), `rejection`
    (piw_rejection_code), `details` (dict or None)."""

    def __init__(self, status, code, rejection, message, details):
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.rejection = status, code, rejection
        self.message, self.details = message, details


def load(path=None):
    lib = ctypes.CDLL(path or os.environ.get("PIW_LIB") or ctypes.util.find_library("piw") or "libpiw.so")
    c_str, c_out = ctypes.c_char_p, ctypes.POINTER(ctypes.c_void_p)
    sig = {
        "piw_version": ([], c_str),
        "piw_string_free": ([ctypes.c_void_p], None),
        "piw_last_error_message": ([], c_str),
        "piw_last_error_code": ([], c_str),
        "piw_last_error_details": ([], c_str),
        "piw_last_rejection_code": ([], ctypes.c_int),
        "piw_connect": ([c_str, c_out], ctypes.c_int),
        "piw_client_call": ([ctypes.c_void_p, c_str, c_str, c_str, ctypes.c_int64, c_out], ctypes.c_int),
        "piw_client_close": ([ctypes.c_void_p], ctypes.c_int),
        "piw_subscribe": ([ctypes.c_void_p, c_str, c_out], ctypes.c_int),
        "piw_subscription_next": ([ctypes.c_void_p, ctypes.c_int64, c_out], ctypes.c_int),
        "piw_subscription_fd": ([ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)], ctypes.c_int),
        "piw_subscription_close": ([ctypes.c_void_p], ctypes.c_int),
        "piw_run_status_is_final": ([c_str], ctypes.c_int),
        "piw_wait_run": ([ctypes.c_void_p, c_str, ctypes.c_uint32, ctypes.c_int64, c_out], ctypes.c_int),
        "piw_shutdown": ([], ctypes.c_int),
    }
    for name, (args, ret) in sig.items():
        fn = getattr(lib, name)
        fn.argtypes, fn.restype = args, ret
    return lib


class Piw:
    """A client: `call(kind, envelope, payload)` returns the receipt as a dict."""

    def __init__(self, lib, options=None):
        self.lib = lib
        self.handle = ctypes.c_void_p()
        self._check(lib.piw_connect(_enc(options), ctypes.byref(self.handle)))

    def _error(self, status):
        lib = self.lib
        details = lib.piw_last_error_details()
        return PiwError(status, (lib.piw_last_error_code() or b"").decode(),
                        REJECTION_CODES.get(lib.piw_last_rejection_code(), "unknown"),
                        (lib.piw_last_error_message() or b"").decode(),
                        json.loads(details) if details else None)

    def _check(self, status):
        if status != STATUS_OK:
            raise self._error(status)

    def _take(self, out):
        """Copies an owned string out of libpiw and frees it."""
        text = ctypes.string_at(out.value).decode()
        self.lib.piw_string_free(out)
        return text

    def call(self, kind, envelope=None, payload=None, timeout_ms=30000):
        out = ctypes.c_void_p()
        self._check(self.lib.piw_client_call(self.handle, kind.encode(), _enc(envelope), _enc(payload),
                                             timeout_ms, ctypes.byref(out)))
        return json.loads(self._take(out))

    def is_final(self, status):
        """Whether a run status is final (libpiw's one list of final states)."""
        return bool(self.lib.piw_run_status_is_final(status.encode()))

    def wait_run(self, run_id, until_parked=False, timeout_ms=-1):
        """The run's record once it is final (or, with until_parked, once it waits for an answer, is paused or is in review: not while it sleeps on a durable timer)."""
        out = ctypes.c_void_p()
        flags = WAIT_UNTIL_PARKED if until_parked else 0
        self._check(self.lib.piw_wait_run(self.handle, run_id.encode(), flags, timeout_ms, ctypes.byref(out)))
        return json.loads(self._take(out))

    def shutdown(self):
        """Closes every handle and stops libpiw's I/O thread (the process may then end cleanly)."""
        self._check(self.lib.piw_shutdown())

    def subscribe(self, filter_):
        sub = ctypes.c_void_p()
        self._check(self.lib.piw_subscribe(self.handle, _enc(filter_), ctypes.byref(sub)))
        return Subscription(self, sub)

    def close(self):
        self._check(self.lib.piw_client_close(self.handle))


class Subscription:
    def __init__(self, client, handle):
        self.client, self.handle = client, handle
        fd = ctypes.c_int(-1)
        client._check(client.lib.piw_subscription_fd(handle, ctypes.byref(fd)))
        self.fd = fd.value

    def next(self, timeout_ms=0):
        """The next event (dict), None when none came in time; raises at the end."""
        out = ctypes.c_void_p()
        status = self.client.lib.piw_subscription_next(self.handle, timeout_ms, ctypes.byref(out))
        if status == STATUS_TIMEOUT:
            return None
        if status == STATUS_END:
            raise EOFError("the subscription ended")
        self.client._check(status)
        return json.loads(self.client._take(out))

    def close(self):
        self.client._check(self.client.lib.piw_subscription_close(self.handle))


def _enc(value):
    return None if value is None else json.dumps(value).encode()


def main(argv):
    if len(argv) < 2:
        print(f"usage: {argv[0]} WORKFLOW_FILE [INPUT_JSON]", file=sys.stderr)
        return 2
    lib = load()
    client = Piw(lib)
    session = f"py-client-{os.getpid()}"
    sub = client.subscribe({"session_id": session})
    receipt = client.call("run.start", payload={
        "workflow_file": os.path.abspath(argv[1]),
        "input": json.loads(argv[2]) if len(argv) > 2 else None,
        "session_id": session,
        "project_dir": os.getcwd(),
    })
    run_id = receipt["body"]["run_id"]
    print("run", run_id, flush=True)
    poller = select.poll()
    poller.register(sub.fd, select.POLLIN)
    finished = False
    while not finished:
        if not poller.poll(60000):  # a guard against a hang only
            print("no event for 60 s", file=sys.stderr)
            return 1
        while (event := sub.next(0)) is not None:
            print("event", event["seq"], event["event_kind"], event["status"], flush=True)
            # It stops for a person's review too, which this client does not do.
            finished = finished or client.is_final(event["status"]) or event["status"] == "review"
    run = client.wait_run(run_id, until_parked=True, timeout_ms=30000)
    print("status", run["status"], run["revision"])
    print("result", json.dumps(run["result"], separators=(",", ":")))
    try:
        client.call("run.resume", {"run_id": run_id})
        print("unexpected success")
    except PiwError as e:
        print("rejected", e.code, e.rejection, e.message)
    sub.close()
    client.close()
    client.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
