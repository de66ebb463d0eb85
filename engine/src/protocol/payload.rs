//! Typed request payloads, one struct per request kind that carries data.
//!
//! Unknown fields are ignored so a newer client can talk to an older host. A missing required
//! field, or a field of the wrong type, is `malformed`. Optional fields accept `null` as
//! "absent"; when encoding, absent optional fields are written as `null`.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::Value;

// The vocabulary the wire shares with the store is defined once, in the store's model.
pub use crate::store::model::{
    AttemptOutcome, DecisionKind, EffectResult, ExecutionMode, InteractionKind, RetryContract,
};
pub use crate::store::records::CursorKey;

pub use super::controllers::*;

fn empty_input() -> Value {
    Value::Object(serde_json::Map::new())
}

fn input_or_empty<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Value, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Null => empty_input(),
        given => given,
    })
}

/// Payload of `run.start`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStart {
    /// Path of the workflow module to run (resolved against `project_dir` when relative).
    pub workflow_file: String,
    /// The run's input: `{}` when absent or `null` (null means absent, as everywhere in the
    /// protocol), as Pi and pi-workflows give it, so a workflow may read `input.x` unguarded.
    #[serde(default = "empty_input", deserialize_with = "input_or_empty")]
    pub input: Value,
    /// The origin Pi session, for interactive steps and workflow messages.
    pub session_id: Option<String>,
    /// Interactive or detached; the host's default when absent.
    pub execution_mode: Option<ExecutionMode>,
    /// The project directory the workflow runs in.
    pub project_dir: Option<String>,
}

/// Payload of `run.status`: which of the run's attempts to include, newest first. Absent (or
/// `null`) means the newest [`DEFAULT_STATUS_ATTEMPTS`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunStatusQuery {
    /// At most this many attempts (default [`DEFAULT_STATUS_ATTEMPTS`], at most
    /// [`MAX_STATUS_ATTEMPTS`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_limit: Option<u32>,
    /// Only attempts older than this one (the last `attempt_id` of a previous reply): the next
    /// page towards the run's first attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempts_before: Option<String>,
}

/// How many attempts `run.status` includes when not asked for a number.
pub const DEFAULT_STATUS_ATTEMPTS: u32 = 100;
/// The most attempts one `run.status` reply includes.
pub const MAX_STATUS_ATTEMPTS: u32 = 1000;
/// How many of a run's newest workflow messages `run.status` includes.
pub const STATUS_MESSAGES: u32 = 20;

/// Payload of `run.list`. Every field but `cursor` and `limit` is a filter; absent means
/// "no filter".
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunList {
    /// At most this many runs, newest first (default [`DEFAULT_LIST_RUNS`], at most
    /// [`MAX_LIST_RUNS`]); fewer when that many do not fit one reply.
    pub limit: Option<u32>,
    /// Only runs started from this Pi session.
    pub session_id: Option<String>,
    /// `true`: only runs that have not ended (not `completed`, `failed`, `cancelled` or
    /// `timed_out`), so a client finds every run still waiting however many have ended since.
    #[serde(default)]
    pub unfinished: Option<bool>,
    /// Only runs in one of these statuses (an empty list filters nothing).
    #[serde(default)]
    pub statuses: Option<Vec<crate::store::RunStatus>>,
    /// The runs after this place in the list: the `next_cursor` of the previous reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<RunListCursor>,
    /// Only the runs this text names as a person shortens a run id (the exact id is one of
    /// them): a prefix of the id (`run-01a2`), or a short id, lower-case hex digits that end
    /// it (`c4230d21`, as `piw runs` shows them): how a client without the database resolves
    /// what a person typed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id_prefix: Option<String>,
}

/// How many runs `run.list` lists when not asked for a number.
pub const DEFAULT_LIST_RUNS: u32 = 100;
/// The most runs one `run.list` reply lists.
pub const MAX_LIST_RUNS: u32 = 10_000;

/// Where a run list continues (`run.list`'s `next_cursor`, given back as its `cursor`; a
/// dry `run.prune`'s too): the place of the last run listed, which never changes, so paging is
/// not disturbed by runs that start or change status meanwhile. Opaque to clients: they pass
/// on what the host gave.
///
/// The place travels with an HMAC-SHA256 of it under the database's [`CursorKey`]: a cursor
/// shaped like one but naming a place the host did not hand out (edited, or made with another
/// database's key) decodes, and the handler refuses it (`invalid_input`) when
/// [`RunListCursor::verify`] fails. The key lives in the database, so a cursor outlives a
/// host restart but not a `piw state reset`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunListCursor {
    /// The place of the last run listed.
    pub key: crate::store::RunListKey,
    mac: [u8; 32],
}

/// HMAC-SHA256 (RFC 2104) of `message` under `key` (32 bytes, under SHA-256's 64-byte block:
/// padded with zeros, never hashed first).
fn hmac_sha256(key: &[u8; 32], message: &[&[u8]]) -> [u8; 32] {
    use sha2::{Digest as _, Sha256};
    let mut block = [0u8; 64];
    block[..32].copy_from_slice(key);
    let pad = |byte: u8| block.map(|b| b ^ byte);
    let mut inner = Sha256::new();
    inner.update(pad(0x36));
    for part in message {
        inner.update(part);
    }
    let mut outer = Sha256::new();
    outer.update(pad(0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

impl RunListCursor {
    const PREFIX: &'static str = "r2.";

    /// The MAC of `place`: the time and the run id, each whole and separated (a run id cannot
    /// take digits from the time, nor the reverse), after a label naming what it signs.
    fn mac_of(key: &CursorKey, place: &crate::store::RunListKey) -> [u8; 32] {
        hmac_sha256(
            &key.0,
            &[
                b"piw run list cursor\0",
                place.created_at.to_string().as_bytes(),
                b"\0",
                place.run_id.as_bytes(),
            ],
        )
    }

    /// The cursor the host hands out for `place`, signed with the database's `key`.
    pub fn sign(key: &CursorKey, place: crate::store::RunListKey) -> Self {
        let mac = Self::mac_of(key, &place);
        Self { key: place, mac }
    }

    /// Whether this cursor was made with `key` for the place it names. The comparison takes
    /// the same time wherever the first difference is.
    pub fn verify(&self, key: &CursorKey) -> bool {
        let expected = Self::mac_of(key, &self.key);
        expected
            .iter()
            .zip(self.mac.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    }

    /// The cursor as it travels: `r2.<mac, 64 hex digits>.<created_at>.<run_id>`.
    pub fn encode(&self) -> String {
        format!(
            "{}{}.{}.{}",
            Self::PREFIX,
            hex::encode(self.mac),
            self.key.created_at,
            self.key.run_id
        )
    }

    /// A cursor from its text; `None` for text not shaped like one (whether the host made it
    /// is [`RunListCursor::verify`]'s question).
    pub fn decode(text: &str) -> Option<Self> {
        let (mac, rest) = text.strip_prefix(Self::PREFIX)?.split_once('.')?;
        let (created_at, run_id) = rest.split_once('.')?;
        let mut bytes = [0u8; 32];
        if mac.len() != 64 || !mac.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
            return None;
        }
        hex::decode_to_slice(mac, &mut bytes).ok()?;
        let created_at = created_at.parse().ok()?;
        (!run_id.is_empty()).then(|| Self {
            key: crate::store::RunListKey {
                created_at,
                run_id: run_id.to_owned(),
            },
            mac: bytes,
        })
    }
}

/// The place `cursor` names, if any, once it is known to be one this database's host handed
/// out; a forged or foreign one is `invalid_input` (its shape was checked when it decoded).
pub fn checked_cursor<'a>(
    cursor: Option<&'a RunListCursor>,
    key: &CursorKey,
) -> Result<Option<&'a crate::store::RunListKey>, crate::store::StoreError> {
    match cursor {
        None => Ok(None),
        Some(c) if c.verify(key) => Ok(Some(&c.key)),
        Some(c) => Err(crate::store::StoreError::InvalidInput(format!(
            "cursor {:?} was not handed out by this installation's host (send back a reply's \
             `next_cursor` unchanged)",
            c.encode()
        ))),
    }
}

impl Serialize for RunListCursor {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&self.encode())
    }
}

impl<'de> Deserialize<'de> for RunListCursor {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        Self::decode(&text).ok_or_else(|| {
            serde::de::Error::custom(format!("cursor {text:?} is not a run list's next_cursor"))
        })
    }
}

#[cfg(test)]
mod cursor_tests {
    use super::*;

    /// RFC 4231, test case 2 ("Jefe"): the key is padded as a 32-byte key is.
    #[test]
    fn hmac_matches_rfc_4231() {
        let mut key = [0u8; 32];
        key[..4].copy_from_slice(b"Jefe");
        // HMAC pads a short key with zeros, so "Jefe" and "Jefe" + 28 zeros are one key.
        let mac = hmac_sha256(&key, &[b"what do ya want ", b"for nothing?"]);
        assert_eq!(
            hex::encode(mac),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_cursor_verifies_only_with_its_key_and_place() {
        let key = CursorKey([7; 32]);
        let place = crate::store::RunListKey {
            created_at: 1_700_000_000_000,
            run_id: "run.with.dots".into(),
        };
        let cursor = RunListCursor::sign(&key, place.clone());
        let back = RunListCursor::decode(&cursor.encode()).expect("decodes");
        assert_eq!(back, cursor);
        assert!(back.verify(&key));
        assert!(!back.verify(&CursorKey([8; 32])));
        let moved = RunListCursor {
            key: crate::store::RunListKey {
                created_at: place.created_at - 1,
                ..place
            },
            mac: cursor.mac,
        };
        assert!(!moved.verify(&key));
        assert_eq!(RunListCursor::decode("page-2"), None);
        assert_eq!(RunListCursor::decode("r1.5.run"), None);
    }
}

/// Payload of `run.prune`: which finished runs go (each given selector must hold; a run not
/// finished, or claimed, never goes). Each request removes at most `limit` runs, oldest first,
/// in one transaction; the reply's `more` says whether to send it again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunPrune {
    /// Only runs that finished at least this long ago (milliseconds, by the host's clock).
    #[serde(default)]
    pub older_than_ms: Option<u64>,
    /// Only runs in one of these statuses, each a finished one (absent or empty: every
    /// finished status); an unfinished one is `malformed`.
    #[serde(default)]
    pub statuses: Option<Vec<crate::store::RunStatus>>,
    /// The newest this many finished runs (of those statuses, by start) stay.
    #[serde(default)]
    pub keep: Option<u64>,
    /// `true`: change nothing; list what would go (`count`, a page of `run_ids`).
    #[serde(default)]
    pub dry_run: Option<bool>,
    /// At most this many runs removed (or listed), default and at most [`MAX_PRUNE_RUNS`].
    #[serde(default)]
    pub limit: Option<u32>,
    /// A dry run's next page: the `next_cursor` of the previous reply.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<RunListCursor>,
}

/// The most runs one `run.prune` removes (one transaction) or lists.
pub const MAX_PRUNE_RUNS: u32 = 500;

/// Payload of `run.cancel`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunCancel {
    /// Why the run is cancelled, kept with the run.
    pub reason: Option<String>,
}

/// Payload of `run.retry`: a person runs the current node of a run in review again.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRetry {
    /// Why (what the person fixed), kept in the `retried` event.
    pub reason: Option<String>,
    /// Who asked (the CLI sends the login name), kept in the event.
    pub by: Option<String>,
    /// Go on with the workflow file as it is now: only for a run in review because a source
    /// changed. The host hashes the run's workflow file again and the run takes it (and the
    /// graph and mounts its next child loads) as its own; the `retried` event keeps both hashes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub accept_source: bool,
}

/// Payload of `effect.resolve`: a person records what became of an uncertain effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EffectResolve {
    /// The uncertain effect (`run.status` → `effects`).
    pub effect_id: String,
    /// What the person found: `applied` with the receipt they provide, or `failed`.
    pub result: EffectResult,
    /// Why they know, kept in the `effect_resolved` event.
    pub reason: Option<String>,
    /// Who, kept in the event.
    pub by: Option<String>,
}

/// Payload of `checkpoint.answer` and `decision.answer`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DecisionAnswer {
    /// The decision being answered.
    pub decision_id: String,
    /// The answer (required; `null` is an explicit answer).
    pub answer: Value,
    /// `decision.answer` only: where the person answered when it was not where the run asked,
    /// `<kind>:<address>` (a decision channel: `telegram:<chat id>`), at most
    /// [`MAX_CHANNEL_BYTES`] bytes; kept with the answer's provenance (the `decision_answered`
    /// event's `channel`). Absent: the client itself (a Pi session, the CLI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub channel: Option<String>,
}

/// The longest `channel` a `decision.answer` may name.
pub const MAX_CHANNEL_BYTES: usize = 200;

/// Payload of `interaction.list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InteractionList {
    /// The Pi session whose pending interactive requests are listed.
    pub session_id: String,
}

/// Payload of `interaction.submit`: a provisional result for an interactive request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InteractionSubmit {
    /// The interactive request being answered.
    pub interaction_id: String,
    /// The step's result, validated by the workflow in a supervised child before it counts.
    pub result: Value,
    /// Refuse (`invalid_transition`) a result equal to one an earlier request of the run
    /// accepted: for a client that bound the submission to whatever request was current when
    /// it sent it (`piw run submit` without `--interaction`), so that the same command run
    /// again does not answer the next visit with the previous one's result.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub refuse_repeat: bool,
}

/// Payload of `interaction.value_put`: a chunk of a large value (see [`super::value`]) that a
/// client uploads for a submission to a pending interactive request, sent in order before the
/// `interaction.submit` whose `result` is the value's reference. Bound to the request: only a
/// client that may answer it may store values for it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InteractionValuePut {
    /// The interactive request the value will answer (pending).
    pub interaction_id: String,
    /// SHA-256 of the value's canonical JSON, 64 lowercase hex digits.
    pub sha256: String,
    /// The value's whole length in bytes, at most [`super::value::MAX_VALUE_BYTES`].
    pub bytes: u64,
    /// Where this chunk starts: the `received` of the previous reply (0 first).
    pub offset: u64,
    /// The chunk, hex-encoded, at most [`super::value::VALUE_PUT_CHUNK_BYTES`] bytes.
    pub data: String,
}

/// Payload of `interaction.fail`: the origin session gave up on a pending interactive
/// request (no submission after its reminders); the attempt fails and the run routes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InteractionFail {
    /// The interactive request given up on.
    pub interaction_id: String,
    /// Why: the attempt's error, which `$result.outcome = failed` routing sees.
    pub reason: String,
}

/// Payload of `interaction.update`: a durable progress update from the agent working on a
/// pending interactive request; the request stays pending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct InteractionUpdate {
    /// The interactive request being worked on.
    pub interaction_id: String,
    /// Human-readable progress text.
    pub message: String,
    /// Structured progress data (`null` when absent).
    #[serde(default)]
    pub data: Value,
}

/// Payload of `message.claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageClaim {
    /// The Pi session claiming its undelivered workflow messages.
    pub session_id: String,
    /// At most this many messages.
    pub limit: Option<u32>,
    /// Who claims, when the client has a stable name (the Pi extension: its session): the
    /// messages this claimant holds are claimed again at once, so a client that restarted
    /// after a crash does not wait for the claims of its previous process to expire.
    pub claimant: Option<String>,
    /// Only messages after this one (in the order they are claimed): the next page for a
    /// client that holds messages it cannot acknowledge yet (the Pi extension, while Pi keeps
    /// no session file), since a claim gives back what the claimant holds first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<String>,
}

/// Payload of `message.ack`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MessageAck {
    /// The claimed message now delivered to the session.
    pub message_id: String,
}

/// Payload of `subscribe`. At least one of the filters must be present; when both are, an
/// event must match both.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subscribe {
    /// Events of this run.
    pub run_id: Option<String>,
    /// Events of runs started from this Pi session.
    pub session_id: Option<String>,
    /// `true`: every run's events (a decision channel's adapter watches for decisions of any
    /// run). Neither of the other filters may be given with it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub all: Option<bool>,
}

/// Payload of `unsubscribe`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unsubscribe {
    /// The subscription to end, as returned by `subscribe`.
    pub subscription_id: String,
}

/// Payload of `worker.hello`, the first message on a worker connection.
///
/// `Debug` redacts the token.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerHello {
    /// The one-time secret from the child's launch envelope. Never log it.
    pub child_token: String,
    /// The worker's process id, checked against the process the host spawned.
    pub pid: u32,
    /// The workflow's data-only graph snapshot (see the graph section). Sent at the run's
    /// first activation, when the host has none stored; the host validates and stores it.
    /// Later activations send it too; a snapshot whose digest differs from the stored one
    /// stops the run for review (`source_changed`).
    #[serde(default)]
    pub definition: Option<Value>,
    /// The mounted sources the workflow resolved when it loaded: name to SHA-256 hex of the
    /// file. Stored at the first activation; compared on every later one.
    #[serde(default)]
    pub mounted_sources: Option<Value>,
    /// When true and the run resumes `fresh` in `run` mode, the host also opens the attempt of
    /// the node the child starts with, in the same transaction: the reply's `resume` then
    /// carries that `node_id`, its `attempt_id` and `deadline_at`, and the child skips
    /// `worker.node_started`. One commit less per activation. Absent means false.
    #[serde(default)]
    pub start_node: bool,
}

impl fmt::Debug for WorkerHello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WorkerHello")
            .field("child_token", &"<redacted>")
            .field("pid", &self.pid)
            .field("definition", &self.definition.is_some())
            .field("mounted_sources", &self.mounted_sources)
            .field("start_node", &self.start_node)
            .finish()
    }
}

/// Payload of `worker.node_started`. The node is the envelope's `node_id`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerNodeStarted {
    /// The attempt's deadline in Unix milliseconds, when the node has a timeout.
    pub deadline_ms: Option<u64>,
    /// For a node whose graph entry says `timeout_at_start`: the timeout the workflow's code
    /// decided for this attempt, in milliseconds from the attempt's start (absent: no
    /// deadline). The host saves the deadline with the attempt and enforces it; it refuses the
    /// field for a node whose deadline the graph fixes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
}

/// The most [`EarlierStep`]s one `worker.transition` or `worker.complete` may carry.
pub const MAX_EARLIER_STEPS: usize = 256;

/// One step a worker took before the one its message reports: the attempt then current ended
/// with `outcome` and the worker moved on to `next_node`, a `compute` node without a timeout,
/// which it ran without reporting its start. The host applies earlier steps first, in order,
/// each checked against the graph like a transition of its own, all in the message's
/// transaction: consecutive pure steps cost one commit instead of one each. If the worker dies
/// before sending them, those compute nodes rerun from the last committed boundary.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct EarlierStep {
    /// How the attempt ended.
    pub outcome: AttemptOutcome,
    /// The node the worker routed to next.
    pub next_node: String,
}

/// Payload of `worker.transition`: the current attempt ended; move to `next_node`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerTransition {
    /// How the attempt ended (the last of `earlier`'s nodes, when there are earlier steps).
    pub outcome: AttemptOutcome,
    /// The node the worker routed to; the host checks it against the graph snapshot.
    pub next_node: String,
    /// Steps taken before this one, oldest first (see [`EarlierStep`]); at most
    /// [`MAX_EARLIER_STEPS`].
    #[serde(default)]
    pub earlier: Vec<EarlierStep>,
    /// For a `next_node` whose graph entry says `timeout_at_start`: its attempt's timeout in
    /// milliseconds, as the workflow's code decided it (absent: no deadline); see
    /// [`WorkerNodeStarted::timeout_ms`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_timeout_ms: Option<u64>,
}

/// What this host understands beyond the first release of `piw.protocol.v1`, listed in the
/// `worker.hello` reply (`features`). A host drops payload fields it does not know, so a
/// worker newer than its host (a package upgraded under a running host) uses an optional
/// field that changes meaning only when the host lists it.
pub const HOST_FEATURES: &[&str] = &[FEATURE_RESULT_IS_OUTPUT, FEATURE_LARGE_VALUES];

/// [`WorkerComplete::result_is_output`] is understood.
pub const FEATURE_RESULT_IS_OUTPUT: &str = "result_is_output";

/// The host stores values over a frame (`worker.value_put`, `value.get`, references in a
/// run's places; see [`super::value`]): a worker may send references, up to
/// [`super::value::MAX_VALUE_BYTES`] a value.
pub const FEATURE_LARGE_VALUES: &str = "large_values";

/// Payload of `worker.complete`: the current attempt ended and the run finished.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerComplete {
    /// How the last attempt ended.
    pub outcome: AttemptOutcome,
    /// The run's result (`null` when absent).
    #[serde(default)]
    pub result: Value,
    /// The run's result is the last outcome's output, which is then not sent twice: `result`
    /// must be `null`, and the outcome must be `succeeded`. A result as large as the output
    /// would otherwise double the message, and a run whose last output passed half the payload
    /// limit could never complete.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub result_is_output: bool,
    /// Steps taken before the last one, oldest first (see [`EarlierStep`]).
    #[serde(default)]
    pub earlier: Vec<EarlierStep>,
    /// The presentation instructions the workflow's `presentationPrompt` function gave for
    /// this end (in place of the snapshot's `presentation_prompt`); absent when it gave none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub presentation: Option<String>,
}

/// Payload of `worker.fail`: the run cannot continue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerFail {
    /// Human-readable error.
    pub error: String,
    /// Stop the run for manual review instead of failing it (for example a changed source
    /// detected before any workflow code ran: nothing happened that needs a terminal state).
    #[serde(default)]
    pub review: bool,
}

/// Payload of `worker.progress`: an informational update, kept as an event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerProgress {
    /// Human-readable progress text.
    pub message: String,
    /// Structured progress data (`null` when absent).
    #[serde(default)]
    pub data: Value,
}

/// Payload of `worker.wait`: park the run until a decision is answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerWait {
    /// Ordinary checkpoint or protected human decision.
    pub decision_kind: DecisionKind,
    /// What to show the person or model who answers.
    pub request: Value,
}

/// Payload of `worker.wait_until`: park the run until a time (a durable timer). Exactly one of
/// `for_ms` and `until_ms`; the host decides the wake time once, from its own clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerWaitUntil {
    /// Wake this many milliseconds after the host receives the request.
    pub for_ms: Option<u64>,
    /// Wake at this time (Unix milliseconds); a time already past wakes at once.
    pub until_ms: Option<u64>,
    /// The node's output when it wakes (`null` when absent).
    #[serde(default)]
    pub output: Value,
}

/// Payload of `worker.interaction_request`: park the run until the origin session answers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerInteractionRequest {
    /// Agent step or assistant-message step.
    pub interaction_kind: InteractionKind,
    /// The exact step contract to present.
    pub request: Value,
    /// The node's deadline in Unix milliseconds, enforced by the host while no worker runs.
    pub deadline_ms: Option<u64>,
}

/// Payload of `worker.notify`: a notify node's content for the origin session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerNotify {
    /// The message content, stored as a workflow message.
    pub content: Value,
}

/// Payload of `worker.effect_reserve`: reserve a managed effect before performing it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerEffectReserve {
    /// The effect's stable key within the run.
    pub effect_key: String,
    /// Fingerprint of the effect's request; the same key with another fingerprint conflicts.
    pub fingerprint: String,
    /// When the effect may be retried.
    pub retry_contract: RetryContract,
}

/// Payload of `worker.effect_applying`: the worker is about to perform a reserved effect.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerEffectApplying {
    /// The reserved effect.
    pub effect_id: String,
}

/// Payload of `worker.effect_settle`: how a performed effect ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerEffectSettle {
    /// The effect being settled.
    pub effect_id: String,
    /// Applied with a receipt, or failed.
    pub result: EffectResult,
}

/// Payload of `worker.validation_result`: a validate-mode child's verdict on a submission.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerValidationResult {
    /// The submission that was validated.
    pub submission_id: String,
    /// Whether the workflow accepted it.
    pub accepted: bool,
    /// Why it was rejected, returned to the model for a corrected retry.
    pub error: Option<String>,
}

/// Payload of `worker.results`: the next page of the `results` a hello reply left out to fit
/// its frame (`results_more`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerResults {
    /// How many results the worker holds so far: the page starts with the next one.
    pub offset: u64,
}

/// Payload of `worker.value_put`: a chunk of a large value (see [`super::value`]), sent in
/// order before the message that refers to it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerValuePut {
    /// SHA-256 of the value's canonical JSON, 64 lowercase hex digits.
    pub sha256: String,
    /// The value's whole length in bytes, at most [`super::value::MAX_VALUE_BYTES`].
    pub bytes: u64,
    /// Where this chunk starts: the `received` of the previous reply (0 first).
    pub offset: u64,
    /// The chunk, hex-encoded, at most [`super::value::VALUE_PUT_CHUNK_BYTES`] bytes.
    pub data: String,
}

/// Payload of `value.get`: a piece of a large value a run holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ValueGet {
    /// SHA-256 of the value, as its reference names it.
    pub sha256: String,
    /// Where the piece starts (0 when absent).
    #[serde(default)]
    pub offset: u64,
    /// The most bytes wanted; the host sends fewer when more would not fit a frame.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_bytes: Option<u64>,
}

/// Payload of `worker.exit`: the worker is about to exit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerExit {
    /// Why (for example `parked`, `finished`, `generation_lost`); kept with the child record.
    pub reason: String,
}
