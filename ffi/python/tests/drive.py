"""Drives a real host through the installed piw package (run by ffi/tests/python_package.rs in a
fresh virtual environment): start, follow, answer, submit (rejected, then accepted), decide,
wait, and the typed errors. Prints `ok` at the end; any failure raises."""

import json
import os
import sys

import piw

workflow = sys.argv[1]
assert "site-packages" in piw.__file__, piw.__file__

with piw.Client() as client:
    run_id = client.start(os.path.basename(workflow), {"n": 1},
                          project_dir=os.path.dirname(workflow))

    # Follow until it parks on the checkpoint (events committed after the subscription).
    with client.follow(run_id) as events:
        seen = list(events)
    assert seen[-1]["event_kind"] == "waiting", seen
    seqs = [e["seq"] for e in seen]
    assert seqs == list(range(seqs[0], seqs[0] + len(seqs))), seqs
    assert client.wait(run_id, until_parked=True)["status"] == "waiting"
    # Not final: a bounded wait runs out.
    try:
        client.wait(run_id, timeout=0.2)
        raise AssertionError("a waiting run is not final")
    except piw.Timeout as e:
        assert e.code == "timeout", e.code
    def until(events, kind, waits_on=None):
        """Reads events until one of `kind` (a `waiting` one on `waits_on`); bounded, so a
        hang fails the test."""
        while True:
            event = events.next(timeout=60)
            assert event is not None, f"no {kind} event within 60 s"
            data = event.get("data") or {}
            if event["event_kind"] == kind and (waits_on is None or data.get("kind") == waits_on):
                return event

    with client.follow(run_id, until_parked=False) as events:
        client.answer(run_id, "go")
        # The agent step: a result the workflow's validate refuses, then one it takes.
        until(events, "interaction_requested")
        client.submit(run_id, {"value": 41})
        rejected = until(events, "submission_rejected")
        assert "value" in json.dumps(rejected["data"]), rejected
        client.submit(run_id, {"value": 42})
        # The protected decision.
        until(events, "waiting", "human_decision")
    try:
        client.decide(run_id, "maybe")
        raise AssertionError("an unknown choice is refused")
    except piw.Rejected as e:
        assert e.code == "malformed" and "choices" in e.details, (e.code, e.details)
    client.decide(run_id, "approve")

    run = client.wait(run_id, timeout=60)
    assert run["status"] == "completed", run
    assert piw.is_final(run["status"]) and not piw.is_final("waiting")

    # Typed errors.
    try:
        client.status("run-that-does-not-exist")
        raise AssertionError("unknown run")
    except piw.NotFound as e:
        assert e.code == "not_found"
    try:
        client.resume(run_id)
        raise AssertionError("a completed run cannot resume")
    except piw.Rejected as e:
        assert e.code == "invalid_transition", e.code
    assert [r["run_id"] for r in client.runs()] == [run_id]

try:
    client.status(run_id)
    raise AssertionError("a closed client")
except piw.Closed:
    pass
piw.shutdown()
print(json.dumps(run["result"]))
print("ok")
