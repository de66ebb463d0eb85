"""Drives a real host through the installed piw package (run by ffi/tests/python_package.rs in a
fresh virtual environment): start (with an idempotency key), follow, answer, submit (rejected, then accepted), decide,
wait, the typed errors, and paging through thousands of runs. Prints `ok` at the end; any
failure raises."""

import json
import os
import sqlite3
import sys

import piw

workflow = sys.argv[1]
assert "site-packages" in piw.__file__, piw.__file__

with piw.Client() as client:
    run_id = client.start(os.path.basename(workflow), {"n": 1},
                          project_dir=os.path.dirname(workflow), idempotency_key="drive-1")
    # The same start with the same key: the same run, no second one (`runs()` below lists one).
    again = client.start(os.path.basename(workflow), {"n": 1},
                         project_dir=os.path.dirname(workflow), idempotency_key="drive-1")
    assert again == run_id, (again, run_id)
    try:
        client.start(os.path.basename(workflow), {"n": 2},
                     project_dir=os.path.dirname(workflow), idempotency_key="drive-1")
        raise AssertionError("the key with another input is refused")
    except piw.Rejected as e:
        assert e.code == "idempotency_conflict", e.code

    # Follow until it parks on the checkpoint (events committed after the subscription). A
    # child quicker than the subscription parks the run before it: no event comes then, and
    # the status, read after subscribing, says so (the API's rule: what happened before is in
    # the status).
    with client.follow(run_id) as events:
        parked_before = client.status(run_id)["run"]["status"] == "waiting"
        seen = [] if parked_before else list(events)
    if seen:
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
        # The run did not get there; the host answered all along and is not blamed.
        assert f"run {run_id} did not reach a final state within the timeout" in e.message, e.message
        assert "host" not in e.message, e.message
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
        # A person at a script is a person, as at the command line.
        [answered] = [d for d in client.status(run_id)["decisions"] if d["kind"] == "checkpoint"]
        assert answered["answered_by"] == "person", answered
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

    # Thousands of runs, added behind the host's back (ended, no children): every one is
    # reached, exactly once, while a run older than the cursor is added between pages.
    home = os.environ["PIW_HOME"]
    project = "/projects/" + "p" * 490  # 2,100 records are more than one reply holds

    def seed(count, base, prefix):
        db = sqlite3.connect(os.path.join(home, "state.sqlite"), timeout=10)
        with db:
            db.executemany(
                "INSERT INTO runs (run_id, workflow_name, source_root, source_hash,"
                " mounted_sources, input, input_hash, origin_session, execution_mode,"
                " project_dir, status, revision, created_at, updated_at, finished_at)"
                " VALUES (?, 'seeded', '/nowhere/s.workflow.json', '0', '{}', 'null', '0',"
                " 'many', 'detached', ?, 'cancelled', 0, ?, ?, ?)",
                [(f"{prefix}-{i:05d}", project, base + i // 7, base + i // 7, base + i // 7)
                 for i in range(count)])
        db.close()
        return [f"{prefix}-{i:05d}" for i in range(count)]

    base = run["created_at"] - 1_000_000
    seeded = seed(2_100, base, "run-seeded")
    first = client.runs_page(session_id="many", limit=10_000)
    assert first["more"] and 0 < len(first["runs"]) < 2_100, len(first["runs"])
    seen = {}
    older = None
    for r in client.all_runs(session_id="many"):
        seen[r["run_id"]] = seen.get(r["run_id"], 0) + 1
        if len(seen) == 150:
            [older] = seed(1, base - 5, "run-older")
    assert all(n == 1 for n in seen.values()), [k for k, n in seen.items() if n > 1]
    assert set(seeded) <= set(seen) and seen[older] == 1, len(seen)
    after = client.runs(session_id="many", limit=3, cursor=first["next_cursor"])
    assert not {r["run_id"] for r in after} & {r["run_id"] for r in first["runs"]}

try:
    client.status(run_id)
    raise AssertionError("a closed client")
except piw.Closed:
    pass
piw.shutdown()
print(json.dumps(run["result"]))
print("ok")
