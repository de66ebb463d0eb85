//! One client connection: frames in, one request at a time to the store thread, the reply
//! out, and subscription events in between. Anything malformed closes this connection only.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::sync::{broadcast, oneshot, watch};

use super::queues::{Job, Published, RunEvent, StoreMsg};
use super::HostShared;
use crate::engine::admission::{self, SubscriptionFilter, WorkerBinding};
use crate::engine::handlers::run::{AcceptedSource, PreparedStart};
use crate::engine::turn;
use crate::protocol::reply::{body_of, ChannelsReloaded, HostStopping, Subscription};
use crate::protocol::{
    encode_frame, payload, Event, FrameDecoder, FrameError, Limits, Receipt, Rejection,
    RejectionCode, Request, RequestBody, ServerFrame,
};

/// A frame that has started must be complete within this time, or the connection is closed
/// (a client sending one byte per second cannot hold a slot forever).
pub const FRAME_COMPLETION_TIMEOUT: Duration = Duration::from_secs(5);

/// The number of the next connection: the engine counts a session as there while any
/// connection follows its events (`engine::presence`), and tells connections apart by it.
static NEXT_CONNECTION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

enum Close {
    Eof,
    Goodbye(RejectionCode, String),
}

/// Refuses a connection the host has no room for, saying why.
pub async fn refuse(mut stream: UnixStream, limits: Limits, message: String) {
    let _ = write(
        &mut stream,
        &mut Inbound::new(limits),
        &ServerFrame::goodbye(RejectionCode::Internal, message),
    )
    .await;
    let _ = stream.shutdown().await;
}

/// Serves one connection until it closes, or until the connection cap closes it
/// ([`super::slots`]: it was idle the longest when another connection needed its room).
pub async fn serve(
    mut stream: UnixStream,
    shared: HostShared,
    mut shutdown: watch::Receiver<bool>,
    slot: std::sync::Arc<super::slots::Slot>,
) {
    let _guard = super::slots::SlotGuard(slot.clone());
    let peer = stream.peer_cred().ok().map(|c| c.uid());
    if let Err(refusal) = admission::authorize_peer(peer, shared.expected_uid) {
        tracing::warn!(?peer, "refused a connection from another user");
        let _ = write(
            &mut stream,
            &mut Inbound::new(shared.limits),
            &ServerFrame::goodbye(refusal.code(), refusal.message()),
        )
        .await;
        return;
    }
    let connection = NEXT_CONNECTION.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut inbound = Inbound::new(shared.limits);
    // Created at the first subscription, so the store thread publishes only while someone
    // listens. A subscriber may still receive events committed shortly before it subscribed
    // (their fsync was pending); it reads the run's status anyway.
    let mut events: Option<broadcast::Receiver<Published>> = None;
    let mut subscriptions: HashMap<String, SubscriptionFilter> = HashMap::new();
    // The run and generation this connection speaks for, after a successful worker.hello.
    let mut worker: Option<WorkerBinding> = None;
    let mut buf = vec![0u8; 64 * 1024];
    // Frames taken so far, and when the partial frame after them was first seen: a frame
    // must be complete within FRAME_COMPLETION_TIMEOUT of that, however it trickles in.
    let mut frames_taken: u64 = 0;
    let mut partial_since: Option<(u64, tokio::time::Instant)> = None;
    let close = loop {
        // Serve every complete frame already buffered.
        match inbound.decoder.next_frame() {
            Ok(Some(body)) => {
                frames_taken += 1;
                slot.set_busy(true);
                let watched = watched_sessions(&subscriptions);
                let frame = handle_frame(&body, &shared, &mut subscriptions, &mut worker).await;
                report_watched(
                    &shared,
                    connection,
                    &watched,
                    &watched_sessions(&subscriptions),
                );
                slot.set_role(worker.is_some(), !subscriptions.is_empty());
                if subscriptions.is_empty() {
                    events = None;
                } else if events.is_none() {
                    events = Some(shared.events.subscribe());
                }
                match frame {
                    Ok(frame) => {
                        if write(&mut stream, &mut inbound, &frame).await.is_err() {
                            break Close::Eof;
                        }
                        slot.set_busy(false);
                        continue;
                    }
                    Err(bad) => {
                        if let Some(frame) = bad.rejection {
                            let _ = write(&mut stream, &mut inbound, &frame).await;
                        }
                        break Close::Goodbye(bad.code, bad.message);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => break Close::Goodbye(e.rejection_code(), e.to_string()),
        }
        // What the reads during the last writes found, once every frame before it is served.
        if let Some(e) = inbound.error.take() {
            break Close::Goodbye(e.rejection_code(), e.to_string());
        }
        let partial = !inbound.decoder.is_at_frame_boundary();
        if inbound.eof {
            break closed_by_peer(partial);
        }
        partial_since = match partial_since {
            Some((taken, since)) if partial && taken == frames_taken => Some((taken, since)),
            _ if partial => Some((frames_taken, tokio::time::Instant::now())),
            _ => None,
        };
        let frame_deadline = partial_since
            .map(|(_, since)| since + FRAME_COMPLETION_TIMEOUT)
            .unwrap_or_else(tokio::time::Instant::now);
        tokio::select! {
            read = stream.read(&mut buf) => match read {
                Ok(0) | Err(_) => break closed_by_peer(partial),
                Ok(n) => {
                    if let Err(e) = inbound.decoder.push(&buf[..n]) {
                        break Close::Goodbye(e.rejection_code(), e.to_string());
                    }
                }
            },
            event = next_event(&mut events), if events.is_some() => match event {
                Ok(event) => {
                    for frame in event_frames(&event, &subscriptions) {
                        if write(&mut stream, &mut inbound, &frame).await.is_err() {
                            return;
                        }
                    }
                }
                // Events it missed are gone from the channel: closing says so, where going on
                // would skip them silently. A code of its own, not `internal`, so clients
                // resubscribe on this and still report real failures of the host.
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    break Close::Goodbye(RejectionCode::SubscriberLagged, format!("subscriber fell {n} events behind; resubscribe and reread status"));
                }
                Err(broadcast::error::RecvError::Closed) => break Close::Goodbye(RejectionCode::HostShuttingDown, "host is stopping".into()),
            },
            _ = tokio::time::sleep_until(frame_deadline), if partial => {
                break Close::Goodbye(RejectionCode::Malformed, format!("frame not completed within {} s", FRAME_COMPLETION_TIMEOUT.as_secs()));
            }
            _ = shutdown.changed() => break Close::Goodbye(RejectionCode::HostShuttingDown, "host is stopping".into()),
            // `internal`: the host's own limit, not the client's fault; connecting again works.
            _ = slot.evict.notified() => break Close::Goodbye(RejectionCode::Internal, slot.eviction_reason()),
        }
    };
    // The sessions it followed are no longer followed through it.
    report_watched(
        &shared,
        connection,
        &watched_sessions(&subscriptions),
        &Default::default(),
    );
    // A child's connection is gone: if its run still needs it, the host stops it after a
    // bound (a child without its connection can only hold its run).
    if let Some(WorkerBinding { run_id, generation }) = worker.take() {
        let _ = shared
            .jobs
            .send(StoreMsg::WorkerDisconnected { run_id, generation });
    }
    if let Close::Goodbye(code, message) = close {
        tracing::debug!(%code, %message, "closing connection");
        let _ = write(
            &mut stream,
            &mut inbound,
            &ServerFrame::goodbye(code, message),
        )
        .await;
    }
    let _ = stream.shutdown().await;
}

/// The sessions a connection's subscriptions follow (a subscription with a session filter).
fn watched_sessions(
    subscriptions: &HashMap<String, SubscriptionFilter>,
) -> std::collections::BTreeSet<String> {
    subscriptions
        .values()
        .filter_map(|filter| filter.session_id.clone())
        .collect()
}

/// Tells the store thread which sessions connection `connection` began (`after`, not
/// `before`) or stopped following: a session followed by a live client presents its runs'
/// steps, whose time runs only then (`engine::presence`). The engine decides what that means.
fn report_watched(
    shared: &HostShared,
    connection: u64,
    before: &std::collections::BTreeSet<String>,
    after: &std::collections::BTreeSet<String>,
) {
    for session_id in after.difference(before) {
        let _ = shared.jobs.send(StoreMsg::SessionWatched {
            session_id: session_id.clone(),
            connection,
        });
    }
    for session_id in before.difference(after) {
        let _ = shared.jobs.send(StoreMsg::SessionUnwatched {
            session_id: session_id.clone(),
            connection,
        });
    }
}

async fn next_event(
    events: &mut Option<broadcast::Receiver<Published>>,
) -> Result<Published, broadcast::error::RecvError> {
    match events {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

fn closed_by_peer(partial: bool) -> Close {
    if partial {
        Close::Goodbye(
            RejectionCode::Malformed,
            "connection closed mid-frame".into(),
        )
    } else {
        Close::Eof
    }
}

/// What the peer sends, decoded as it arrives, including while this task writes to it.
///
/// Reading on while a write is blocked is what keeps the two sides from waiting on each other
/// forever: a client blocked writing a large request, or a pipeline of requests, is not
/// reading, so the events and replies we write to it fill its socket, and if we stopped
/// reading too, neither write would ever finish. Reads during a write go on while less than
/// [`READ_AHEAD_BYTES`] is buffered, and past that only until the next frame is complete (one
/// request always gets through whole). So a client that floods requests and never reads is
/// still held back by the kernel's buffers, and the decoder holds at most
/// `READ_AHEAD_BYTES` + one frame.
struct Inbound {
    decoder: FrameDecoder,
    limits: Limits,
    /// The peer closed its side during a write (frames before that are still served).
    eof: bool,
    /// The bytes read during a write broke the frame rules; the connection closes once the
    /// frames before them are served.
    error: Option<FrameError>,
}

/// Bytes read at a time while a write is blocked.
const READ_WHILE_WRITING_CHUNK: usize = 16 * 1024;

/// Requests read ahead while a write to the client is blocked, whole frames or not: a client
/// may write this much (thousands of small requests) before it reads a reply.
pub const READ_AHEAD_BYTES: usize = 1024 * 1024;

impl Inbound {
    fn new(limits: Limits) -> Self {
        Self {
            decoder: FrameDecoder::new(limits),
            limits,
            eof: false,
            error: None,
        }
    }

    /// How many bytes a read during a write may take now (0: none).
    fn read_room(&self) -> usize {
        if self.eof || self.error.is_some() {
            return 0;
        }
        let buffered = self.decoder.buffered_len();
        if buffered >= READ_AHEAD_BYTES && self.decoder.has_next() {
            return 0;
        }
        self.limits
            .max_buffered_bytes
            .saturating_sub(buffered)
            .min(READ_WHILE_WRITING_CHUNK)
    }
}

/// Writes `bytes` whole, reading what the peer sends meanwhile into `inbound`.
async fn write_reading(
    stream: &mut UnixStream,
    inbound: &mut Inbound,
    bytes: &[u8],
) -> std::io::Result<()> {
    let (mut reader, mut writer) = stream.split();
    let mut chunk = [0u8; READ_WHILE_WRITING_CHUNK];
    let mut written = 0;
    while written < bytes.len() {
        let room = inbound.read_room();
        tokio::select! {
            // Writing first: reading is only for when the write cannot go on.
            biased;
            sent = writer.write(&bytes[written..]) => match sent? {
                0 => return Err(std::io::ErrorKind::WriteZero.into()),
                n => written += n,
            },
            read = reader.read(&mut chunk[..room]), if room > 0 => match read {
                Ok(0) | Err(_) => inbound.eof = true,
                Ok(n) => {
                    if let Err(e) = inbound.decoder.push(&chunk[..n]) {
                        inbound.error = Some(e);
                    }
                }
            },
        }
    }
    Ok(())
}

/// Writes one frame, reading what the peer sends meanwhile (see [`Inbound`]). A frame over the
/// frame limit is never sent: a reply becomes a `payload_too_large` rejection of the same
/// request (the connection stays usable: the client asks for less), an event a goodbye
/// (`Err`: the caller closes the connection, and the subscriber rereads the run).
async fn write(
    stream: &mut UnixStream,
    inbound: &mut Inbound,
    frame: &ServerFrame,
) -> std::io::Result<()> {
    // The host's own limits (the ones `run.status` and `run.list` fit their replies under).
    let limits = inbound.limits;
    let (bytes, closes) = match encode_frame(frame, &limits) {
        Ok(bytes) => (bytes, false),
        Err(FrameError::TooLarge { len, limit }) => {
            let (instead, closes) = oversized(frame, len, limit);
            tracing::warn!(len, limit, "a frame over the frame limit was not sent");
            let bytes = encode_frame(&instead, &limits)
                .map_err(|e| std::io::Error::other(e.to_string()))?;
            (bytes, closes)
        }
        Err(e) => return Err(std::io::Error::other(e.to_string())),
    };
    write_reading(stream, inbound, &bytes).await?;
    if closes {
        return Err(std::io::Error::other(
            "an event over the frame limit ended the connection",
        ));
    }
    Ok(())
}

/// What is sent instead of `frame`, `len` bytes over the frame limit `limit`, and whether the
/// connection must close after it.
fn oversized(frame: &ServerFrame, len: usize, limit: usize) -> (ServerFrame, bool) {
    match frame {
        ServerFrame::Response(response) => {
            let rejection = Rejection::new(
                RejectionCode::PayloadTooLarge,
                format!(
                    "the reply is {len} bytes, over the frame limit of {limit} bytes; ask for less (a smaller limit, one run at a time)"
                ),
            )
            .with_details(json!({ "reply_bytes": len, "limit": limit }));
            (
                ServerFrame::rejection(response.request_id.clone(), rejection),
                false,
            )
        }
        ServerFrame::Event(event) => (
            ServerFrame::goodbye(
                RejectionCode::PayloadTooLarge,
                format!(
                    "an event of run {} is {len} bytes, over the frame limit of {limit} bytes; resubscribe and reread the run",
                    event.run_id
                ),
            ),
            true,
        ),
        ServerFrame::Goodbye(goodbye) => (
            ServerFrame::goodbye(goodbye.code, format!("goodbye of {len} bytes cut short")),
            true,
        ),
    }
}

fn event_frames(event: &RunEvent, subs: &HashMap<String, SubscriptionFilter>) -> Vec<ServerFrame> {
    subs.iter()
        .filter(|(_, filter)| filter.matches(&event.run_id, event.origin_session.as_deref()))
        .map(|(id, _)| {
            ServerFrame::Event(Event {
                schema: Default::default(),
                subscription_id: id.clone(),
                run_id: event.run_id.clone(),
                seq: event.seq,
                event_kind: event.kind.clone(),
                status: event.status.clone(),
                revision: event.revision,
                at_ms: u64::try_from(event.at_ms).unwrap_or(0),
                data: event.data.clone(),
            })
        })
        .collect()
}

/// A request the host could not decode: answered (when it had a request id), then the
/// connection is closed with a goodbye.
struct Undecodable {
    rejection: Option<ServerFrame>,
    code: RejectionCode,
    message: String,
}

/// Decodes and answers one frame. `Err` closes the connection with a goodbye.
async fn handle_frame(
    body: &[u8],
    shared: &HostShared,
    subscriptions: &mut HashMap<String, SubscriptionFilter>,
    worker: &mut Option<WorkerBinding>,
) -> Result<ServerFrame, Undecodable> {
    let request = match Request::decode(body, &shared.limits) {
        Ok(r) => r,
        Err(e) => {
            return Err(Undecodable {
                rejection: e.rejection_frame(),
                code: e.code,
                message: e.message,
            })
        }
    };
    let id = request.request_id.clone();
    let answer = |r: Result<Receipt, Rejection>| match r {
        Ok(receipt) => ServerFrame::receipt(id.clone(), receipt),
        Err(rejection) => ServerFrame::rejection(id.clone(), rejection),
    };
    if *shared.stopping.borrow() && !matches!(request.body, RequestBody::HostStatus) {
        return Ok(answer(Err(Rejection::new(
            RejectionCode::HostShuttingDown,
            "host is stopping",
        ))));
    }
    // A worker speaks only for the run and generation its connection is bound to.
    if request.is_worker() {
        if let Err(refusal) = admission::worker_may_send(&request, worker.as_ref()) {
            return Ok(answer(Err(refusal.into())));
        }
    }
    match &request.body {
        RequestBody::HostStatus => Ok(answer(Ok(shared.status().await))),
        RequestBody::HostStop => {
            shared.begin_stop();
            Ok(answer(reply(&HostStopping { stopping: true })))
        }
        // The channels' files, off the runtime's one worker thread; the store thread's next
        // turn starts and stops adapters to match.
        RequestBody::ChannelReload => {
            let home = shared.facts.paths.home.clone();
            let read = move || super::channel_launch::read_specs(&home);
            let specs = match tokio::task::spawn_blocking(read).await {
                Ok(Ok(specs)) => specs,
                Ok(Err(e)) => {
                    return Ok(answer(Err(Rejection::new(
                        RejectionCode::Malformed,
                        format!("cannot read the decision channels: {e}"),
                    ))))
                }
                Err(e) => {
                    return Ok(answer(Err(Rejection::new(
                        RejectionCode::Internal,
                        format!("reading the decision channels failed: {e}"),
                    ))))
                }
            };
            let names = specs.iter().map(|s| s.name.clone()).collect();
            if shared.jobs.send(StoreMsg::Channels(specs)).is_err() {
                return Ok(answer(Err(Rejection::new(
                    RejectionCode::HostShuttingDown,
                    "host is stopping",
                ))));
            }
            Ok(answer(reply(&ChannelsReloaded { channels: names })))
        }
        RequestBody::Subscribe(s) => {
            let filter = match admission::admit_subscription(s, subscriptions.len()) {
                Ok(filter) => filter,
                Err(refusal) => return Ok(answer(Err(refusal.into()))),
            };
            // The store answers `not_found` for a run that does not exist.
            if filter.names_a_run() {
                if let Err(rejection) =
                    ask_store(shared, request.clone(), Prepared::default(), None).await
                {
                    return Ok(answer(Err(rejection)));
                }
            }
            let sub_id = crate::ids::new_id("sub");
            subscriptions.insert(sub_id.clone(), filter);
            Ok(answer(reply(&Subscription {
                subscription_id: sub_id,
            })))
        }
        RequestBody::Unsubscribe(u) => {
            let removed = subscriptions.remove(&u.subscription_id).is_some();
            Ok(answer(if removed {
                reply(&Subscription {
                    subscription_id: u.subscription_id.clone(),
                })
            } else {
                Err(Rejection::new(
                    RejectionCode::NotFound,
                    format!("no subscription {}", u.subscription_id),
                ))
            }))
        }
        body => {
            let mut start_refused = None;
            let mut accepted_source = None;
            let start = match body {
                RequestBody::RunStart(start) => {
                    if let Err(refusal) = admission::runtime_for_start(
                        &start.workflow_file,
                        &shared.runtime_suffixes,
                        &shared.missing_runtimes,
                    ) {
                        return Ok(answer(Err(refusal.into())));
                    }
                    // File I/O, off the runtime's one worker thread: it serves every connection.
                    let start = start.clone();
                    let bridges = shared.bridges.clone();
                    let home = shared.facts.paths.home.clone();
                    let prepare = move || {
                        let prepared = super::start_file::prepare_start(&start)?;
                        // An explicit detached start is refused at once when no Pi can serve
                        // its steps (Pi starts twice here: seconds, on this blocking thread).
                        if start.execution_mode == Some(crate::store::ExecutionMode::Detached) {
                            let (settings, env) = &*bridges;
                            let cwd = std::path::Path::new(&prepared.new_run.project_dir);
                            let definition = super::bridge_launch::start_definition(
                                settings.as_ref(),
                                &prepared.new_run.source_root,
                                env,
                                &home,
                                cwd,
                            );
                            super::bridge_launch::check_detached_start(
                                settings.as_ref(),
                                definition.as_ref(),
                                &start.input,
                                env,
                                &home,
                                cwd,
                            )?;
                        }
                        Ok(prepared)
                    };
                    match tokio::task::spawn_blocking(prepare).await {
                        Ok(Ok(p)) => Some(p),
                        // A retry of a start that committed (its reply was lost) gets its
                        // receipt even if the file has moved since: the store looks it up
                        // and answers with this rejection only when there is none.
                        Ok(Err(rejection)) => {
                            start_refused = Some(rejection);
                            None
                        }
                        Err(e) => {
                            return Ok(answer(Err(Rejection::new(
                                RejectionCode::Internal,
                                format!("reading the workflow file failed: {e}"),
                            ))))
                        }
                    }
                }
                // A controller's child workflow: its file read and hashed as a start's is, for
                // the new attempt the store may need (a found request needs none).
                RequestBody::ControllerWorkflowEnsure(ensure) => {
                    let start = payload::RunStart {
                        workflow_file: ensure.workflow_file.clone(),
                        input: ensure.input.clone(),
                        session_id: None,
                        execution_mode: None,
                        project_dir: Some(ensure.project_dir.clone()),
                    };
                    match tokio::task::spawn_blocking(move || {
                        super::start_file::prepare_start(&start)
                    })
                    .await
                    {
                        Ok(Ok(p)) => Some(p),
                        Ok(Err(rejection)) => {
                            start_refused = Some(rejection);
                            None
                        }
                        Err(e) => {
                            return Ok(answer(Err(Rejection::new(
                                RejectionCode::Internal,
                                format!("reading the workflow file failed: {e}"),
                            ))))
                        }
                    }
                }
                // A person keeps a changed source: the run's file is hashed again, here (file
                // I/O, on a blocking thread); the store decides whether the run may take it.
                RequestBody::RunRetry(retry) if retry.accept_source => {
                    match accepted_source_of(shared, &request).await {
                        Ok(accepted) => accepted_source = Some(accepted),
                        // As for a start: a replay of a retry that committed still gets its
                        // receipt; otherwise this refusal answers.
                        Err(rejection) => start_refused = Some(rejection),
                    }
                    None
                }
                _ => None,
            };
            let meta = if request.class().is_durable_command() {
                match turn::command_meta(&request) {
                    Ok(meta) => Some(meta),
                    Err(rejection) => return Ok(answer(Err(rejection))),
                }
            } else {
                None
            };
            let hello = admission::hello_binding(&request);
            let prepared = Prepared {
                start,
                accepted_source,
                start_refused,
            };
            let result = ask_store(shared, request, prepared, meta).await;
            if let (Some(binding), true) = (hello, admission::hello_accepted(&result)) {
                *worker = Some(binding);
            }
            Ok(answer(result))
        }
    }
}

/// What the connection task read from files for a request, before the store thread sees it.
#[derive(Default)]
struct Prepared {
    start: Option<PreparedStart>,
    accepted_source: Option<AcceptedSource>,
    start_refused: Option<Rejection>,
}

/// `run.retry` with `accept_source`: the run's workflow file (read from the store first: the
/// client does not name it) hashed as it is now, on a blocking thread.
async fn accepted_source_of(
    shared: &HostShared,
    retry: &Request,
) -> Result<AcceptedSource, Rejection> {
    let run_id = retry.run_id.clone().unwrap_or_default();
    let read = Request::new(
        format!("{}-source", retry.request_id),
        RequestBody::RunStatus(payload::RunStatusQuery {
            attempts_limit: Some(1),
            ..Default::default()
        }),
    )
    .with_run_id(&run_id);
    let status = ask_store(shared, read, Prepared::default(), None).await?;
    let Some(source_root) = status.body["run"]["source_root"]
        .as_str()
        .map(str::to_owned)
    else {
        return Err(Rejection::new(
            RejectionCode::Internal,
            format!("run {run_id}: its status names no workflow file"),
        ));
    };
    match tokio::task::spawn_blocking(move || super::start_file::hash_accepted_source(&source_root))
        .await
    {
        Ok(result) => result,
        Err(e) => Err(Rejection::new(
            RejectionCode::Internal,
            format!("reading the workflow file failed: {e}"),
        )),
    }
}

/// Hands `request` to the store thread and waits for its answer (a read, or a durable
/// command with its receipt identity `meta`).
async fn ask_store(
    shared: &HostShared,
    request: Request,
    prepared: Prepared,
    meta: Option<crate::store::CommandMeta>,
) -> Result<Receipt, Rejection> {
    let stopping = || Rejection::new(RejectionCode::HostShuttingDown, "host is stopping");
    let (tx, rx) = oneshot::channel();
    let Prepared {
        start,
        accepted_source,
        start_refused,
    } = prepared;
    let job = Job {
        request,
        start,
        accepted_source,
        start_refused,
        meta,
        reply: tx,
    };
    if shared.jobs.send(StoreMsg::Request(Box::new(job))).is_err() {
        return Err(stopping());
    }
    rx.await.unwrap_or_else(|_| Err(stopping()))
}

/// The receipt of a connection request's typed reply.
fn reply<T: serde::Serialize>(reply: &T) -> Result<Receipt, Rejection> {
    body_of(reply)
        .map(|body| Receipt::new(None, body))
        .map_err(|e| {
            Rejection::new(
                RejectionCode::Internal,
                format!("cannot encode the reply: {e}"),
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::{read_frame, Receipt};

    /// Writes `frame` through [`write`] and returns what the peer reads, decoded, and whether
    /// `write` reported the connection as ended.
    fn written(frame: ServerFrame) -> (ServerFrame, bool) {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async {
            let (mut ours, theirs) = UnixStream::pair().unwrap();
            let reader = tokio::task::spawn_blocking(move || {
                let mut theirs = theirs.into_std().unwrap();
                theirs.set_nonblocking(false).unwrap();
                read_frame(&mut theirs, &Limits::default())
                    .unwrap()
                    .expect("a frame before the end of the stream")
            });
            let ended = write(&mut ours, &mut Inbound::new(Limits::default()), &frame)
                .await
                .is_err();
            drop(ours); // nothing written: the reader sees the end, not a hang
            let body = reader.await.unwrap();
            (ServerFrame::decode(&body).unwrap(), ended)
        })
    }

    fn big() -> serde_json::Value {
        json!({ "runs": "x".repeat(Limits::default().max_frame_bytes + 1) })
    }

    #[test]
    fn a_reply_over_the_frame_limit_becomes_a_payload_too_large_rejection_of_its_request() {
        let (frame, ended) = written(ServerFrame::receipt("req-1", Receipt::new(None, big())));
        let ServerFrame::Response(response) = frame else {
            panic!("expected a response, got {frame:?}");
        };
        assert_eq!(response.request_id, "req-1");
        let rejection = response.result.expect_err("a rejection");
        assert_eq!(rejection.code, RejectionCode::PayloadTooLarge);
        assert!(!ended, "the connection stays usable");
    }

    #[test]
    fn an_event_over_the_frame_limit_ends_the_connection_with_a_goodbye() {
        let event = ServerFrame::Event(Event {
            schema: Default::default(),
            subscription_id: "sub-1".into(),
            run_id: "run-1".into(),
            seq: 1,
            event_kind: "completed".into(),
            status: "completed".into(),
            revision: 1,
            at_ms: 0,
            data: big(),
        });
        let (frame, ended) = written(event);
        let ServerFrame::Goodbye(goodbye) = frame else {
            panic!("expected a goodbye, got {frame:?}");
        };
        assert_eq!(goodbye.code, RejectionCode::PayloadTooLarge);
        assert!(goodbye.message.contains("run-1"), "{}", goodbye.message);
        assert!(ended);
    }

    fn run_event(run_id: &str, session: Option<&str>) -> RunEvent {
        RunEvent {
            run_id: run_id.into(),
            origin_session: session.map(Into::into),
            seq: 1,
            kind: "paused".into(),
            status: "waiting".into(),
            revision: 1,
            at_ms: 0,
            data: serde_json::Value::Null,
        }
    }

    /// The subscriptions `event` is delivered to.
    fn delivered_to(event: &RunEvent, subs: &HashMap<String, SubscriptionFilter>) -> Vec<String> {
        let mut ids: Vec<String> = event_frames(event, subs)
            .into_iter()
            .map(|frame| match frame {
                ServerFrame::Event(e) => e.subscription_id,
                other => panic!("expected an event, got {other:?}"),
            })
            .collect();
        ids.sort();
        ids
    }

    #[test]
    fn a_subscription_with_a_run_and_a_session_gets_only_events_matching_both() {
        let filter = |run: Option<&str>, session: Option<&str>| SubscriptionFilter {
            run_id: run.map(str::to_owned),
            session_id: session.map(str::to_owned),
        };
        let subs: HashMap<String, SubscriptionFilter> = [
            ("by-run".to_owned(), filter(Some("run-a"), None)),
            ("by-session".to_owned(), filter(None, Some("s1"))),
            ("by-both".to_owned(), filter(Some("run-a"), Some("s1"))),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            delivered_to(&run_event("run-a", Some("s1")), &subs),
            ["by-both", "by-run", "by-session"]
        );
        // run-a in another session: the run matches, the session does not.
        assert_eq!(
            delivered_to(&run_event("run-a", Some("s2")), &subs),
            ["by-run"]
        );
        assert_eq!(delivered_to(&run_event("run-a", None), &subs), ["by-run"]);
        // Another run of session s1: the session matches, the run does not.
        assert_eq!(
            delivered_to(&run_event("run-b", Some("s1")), &subs),
            ["by-session"]
        );
        assert!(delivered_to(&run_event("run-b", None), &subs).is_empty());
    }

    #[test]
    fn a_frame_within_the_limit_is_sent_as_it_is() {
        let (frame, ended) = written(ServerFrame::receipt(
            "req-2",
            Receipt::new(None, json!({ "ok": 1 })),
        ));
        let ServerFrame::Response(response) = frame else {
            panic!("expected a response, got {frame:?}");
        };
        assert_eq!(response.result.expect("a receipt").body, json!({ "ok": 1 }));
        assert!(!ended);
    }
}
