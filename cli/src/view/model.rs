//! What the viewer shows, read from the store: no terminal, no drawing. Each screen loads only
//! what fits on it (a page of runs, the per-node summary, one attempt, a window of events), so a
//! run with thousands of attempts or events loads as fast as a small one.

use piw_host::clock::UnixMillis;
use piw_host::graph::{Edge, Graph, NodeKind};
use piw_host::store::prelude::*;
use piw_host::store::{
    AttemptDetail, AttemptRequest, AttemptSpan, ChildRecord, EffectRecord, EventCursor,
    EventRecord, MessageRecord, NodeActivity, RunFilter, RunRecord, RunStatus, RunSummary, Store,
    StoreResult, UpdateRecord,
};

/// How many runs one page of the run list holds (more than any terminal shows at once).
pub const RUNS_PAGE: u32 = 200;
/// How many events the run view loads at a time; stepping back past them loads the next page.
pub const EVENTS_PAGE: u32 = 100;
/// How many of a run's newest workflow messages the run view reads: a `notified` event shows
/// its message's text when it is one of them.
pub const VIEW_MESSAGES: u32 = 200;

/// The run list.
#[derive(Debug, Clone)]
pub struct RunsModel {
    pub filter: RunFilter,
    pub rows: Vec<RunSummary>,
    /// Runs matching the filter in all (the list loads [`RUNS_PAGE`] at a time).
    pub total: u64,
    pub selected: usize,
    /// The short id of each run listed (`crate::run_ids::short_ids`), by run id.
    pub short_ids: std::collections::HashMap<String, String>,
}

impl RunsModel {
    pub fn load(store: &Store, filter: RunFilter) -> StoreResult<Self> {
        let (rows, total) = store.runs_page(&filter, None, RUNS_PAGE)?;
        let mut model = Self {
            filter,
            rows,
            total,
            selected: 0,
            short_ids: Default::default(),
        };
        model.read_short_ids(store)?;
        Ok(model)
    }

    /// The short ids of the runs listed now.
    fn read_short_ids(&mut self, store: &Store) -> StoreResult<()> {
        let ids: Vec<&str> = self.rows.iter().map(|r| r.run_id.as_str()).collect();
        let short = crate::run_ids::short_ids_in(store, &ids)?;
        self.short_ids = ids.iter().map(|id| (*id).to_owned()).zip(short).collect();
        Ok(())
    }

    /// The short id of `run_id` (the id whole when it was not read).
    pub fn short_id<'a>(&'a self, run_id: &'a str) -> &'a str {
        self.short_ids.get(run_id).map_or(run_id, String::as_str)
    }

    /// Reads the list again, keeping the selected run selected when it is still listed.
    pub fn reload(&mut self, store: &Store) -> StoreResult<()> {
        let keep = self.selected_run().map(str::to_owned);
        // As many runs as were loaded (more pages once the person scrolled past the first).
        let loaded = u32::try_from(self.rows.len()).unwrap_or(u32::MAX);
        let (rows, total) = store.runs_page(&self.filter, None, loaded.max(RUNS_PAGE))?;
        self.rows = rows;
        self.total = total;
        self.selected = keep
            .and_then(|id| self.rows.iter().position(|r| r.run_id == id))
            .unwrap_or(self.selected)
            .min(self.rows.len().saturating_sub(1));
        self.read_short_ids(store)
    }

    pub fn selected_run(&self) -> Option<&str> {
        self.rows.get(self.selected).map(|r| r.run_id.as_str())
    }

    /// Moves the selection; moving past the last run loaded loads the next page.
    pub fn move_by(&mut self, store: &Store, delta: isize) -> StoreResult<()> {
        let wanted = self.selected.saturating_add_signed(delta);
        if wanted >= self.rows.len() && (self.rows.len() as u64) < self.total {
            // After the last run loaded, not at an offset: runs started since the first page
            // would shift an offset and show its last run again.
            let after = self.rows.last().map(RunSummary::list_key);
            let (more, total) = store.runs_page(&self.filter, after.as_ref(), RUNS_PAGE)?;
            self.rows.extend(more);
            self.total = total;
            self.read_short_ids(store)?;
        }
        self.selected = step(self.selected, delta, self.rows.len());
        Ok(())
    }

    /// The next status filter: all, then each status in turn.
    pub fn cycle_status(&mut self) {
        self.filter.status = match self.filter.status {
            None => Some(RunStatus::ALL[0]),
            Some(s) => RunStatus::ALL
                .iter()
                .position(|x| *x == s)
                .and_then(|i| RunStatus::ALL.get(i + 1).copied()),
        };
        self.selected = 0;
    }

    /// The session filter: the selected run's session, or none when one is set.
    pub fn toggle_session(&mut self) {
        self.filter.session = match self.filter.session {
            Some(_) => None,
            None => self
                .rows
                .get(self.selected)
                .and_then(|r| r.origin_session.clone()),
        };
        self.selected = 0;
    }
}

/// One node of the run view: the graph's node with what the run did there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRow {
    pub node_id: String,
    /// `None` for a node the run visited that the snapshot does not have (no snapshot yet).
    pub kind: Option<NodeKind>,
    /// The included workflow the node belongs to (`repair` for `repair.fix`).
    pub mount: Option<String>,
    pub activity: Option<NodeActivity>,
    /// Where the run goes after this node, as text (`fetch`, `ok→tell retry→fetch *→ask`).
    pub next: Vec<(Option<String>, String)>,
    pub is_current: bool,
}

/// What the inspector shows for the selected node: its newest attempt and what it did.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Inspector {
    pub attempt: Option<AttemptDetail>,
    /// The input the attempt ran with.
    pub input: Option<serde_json::Value>,
    pub requests: Vec<AttemptRequest>,
    pub effects: Vec<EffectRecord>,
    /// The run's latest updates the node published (per `(type, key)`); in history, those not
    /// replaced after the event shown.
    pub updates: Vec<UpdateRecord>,
    /// The run's progress and notify events dropped over its event budget.
    pub events_dropped: u64,
}

/// One run: its graph with node states, the inspector, and a window of its events.
#[derive(Debug, Clone)]
pub struct RunModel {
    pub run: RunRecord,
    pub graph: Option<Graph>,
    /// Why a stored snapshot could not be read (the view still shows the nodes visited).
    pub graph_error: Option<String>,
    pub nodes: Vec<NodeRow>,
    pub selected: usize,
    pub inspector: Inspector,
    /// The newest child of the run: its exit and stderr tail.
    pub child: Option<ChildRecord>,
    /// Loaded events, newest first (the newest [`EVENTS_PAGE`], more as history goes back).
    pub events: Vec<EventRecord>,
    pub older_events: Option<EventCursor>,
    /// The run's newest workflow messages (a detached run's are kept only there).
    pub messages: Vec<MessageRecord>,
    /// Stepping through history: the index into `events` of the event shown; `None` is live.
    pub history: Option<usize>,
    /// The run's attempts placed in its history, read when history is first shown (and again
    /// on a change while it is): the nodes are drawn as they were after the event shown.
    pub spans: Option<Vec<AttemptSpan>>,
}

impl RunModel {
    pub fn load(store: &Store, run_id: &str) -> StoreResult<Self> {
        let mut model = Self {
            run: store.run(run_id)?,
            graph: None,
            graph_error: None,
            nodes: Vec::new(),
            selected: 0,
            inspector: Inspector::default(),
            child: None,
            events: Vec::new(),
            older_events: None,
            messages: Vec::new(),
            history: None,
            spans: None,
        };
        model.reload(store)?;
        Ok(model)
    }

    /// Reads the run again (after a change), keeping the selected node and, in history, the
    /// event shown.
    pub fn reload(&mut self, store: &Store) -> StoreResult<()> {
        let run_id = self.run.run_id.clone();
        self.run = store.run(&run_id)?;
        if self.graph.is_none() {
            if let Some(definition) = store.run_definition(&run_id)? {
                match Graph::parse(&definition) {
                    Ok(g) => self.graph = Some(g),
                    Err(e) => self.graph_error = Some(e.to_string()),
                }
            }
        }
        self.child = store.last_child(&run_id)?;
        self.messages = store.newest_messages(&run_id, VIEW_MESSAGES)?.0;
        // The newest page again; an event shown in history keeps its place by seq.
        let shown_seq = self.shown_event().map(|e| e.seq);
        let page = store.events_page(&run_id, None, EVENTS_PAGE)?;
        self.events = page.newest_first;
        self.older_events = page.older;
        if let Some(seq) = shown_seq {
            while self.events.last().is_some_and(|e| e.seq > seq) && self.older_events.is_some() {
                self.load_older(store)?;
            }
            self.history = self.events.iter().position(|e| e.seq == seq);
        }
        self.spans = None;
        let keep = self.selected_node().map(str::to_owned);
        self.place_nodes(store)?;
        self.selected = keep
            .and_then(|id| self.nodes.iter().position(|n| n.node_id == id))
            .or_else(|| self.nodes.iter().position(|n| n.is_current))
            .unwrap_or(0);
        self.load_inspector(store)
    }

    /// The node rows: as they are now when live; in history, as they were after the event
    /// shown, replayed from the run's attempts placed in its events.
    fn place_nodes(&mut self, store: &Store) -> StoreResult<()> {
        let (activity, current) = match self.shown_event().map(|e| e.seq) {
            None => {
                self.spans = None;
                (
                    store.node_activity(&self.run.run_id)?,
                    self.run.current_node.clone(),
                )
            }
            Some(seq) => {
                if self.spans.is_none() {
                    self.spans = Some(store.attempt_history(&self.run.run_id)?);
                }
                let spans = self.spans.as_deref().unwrap_or_default();
                (activity_at(spans, seq), current_at(spans, seq))
            }
        };
        self.nodes = node_rows(self.graph.as_ref(), activity, current.as_deref());
        Ok(())
    }

    fn load_older(&mut self, store: &Store) -> StoreResult<()> {
        let page = store.events_page(&self.run.run_id, self.older_events, EVENTS_PAGE)?;
        self.events.extend(page.newest_first);
        self.older_events = page.older;
        Ok(())
    }

    fn load_inspector(&mut self, store: &Store) -> StoreResult<()> {
        // The selected node's newest attempt (in history, its newest then, as it was then).
        let attempt_id = self
            .nodes
            .get(self.selected)
            .and_then(|n| n.activity.as_ref())
            .map(|a| a.last_attempt_id.clone());
        self.inspector = match attempt_id {
            Some(id) => {
                let mut attempt = store.attempt_detail(&id)?;
                let seq = self.shown_event().map(|e| e.seq);
                let then = seq.and_then(|seq| {
                    let span = self.spans.as_ref()?.iter().find(|s| s.attempt_id == id)?;
                    span.open_at(seq)
                        .then(|| span.status_at(seq).map(str::to_owned))?
                });
                if let Some(status) = then {
                    // Still open after the event shown: nothing of its end is shown yet.
                    attempt.status = status;
                    attempt.finished_at = None;
                    attempt.output = None;
                    attempt.error = None;
                }
                let node = self.nodes.get(self.selected).map(|n| n.node_id.clone());
                let mut updates = store.updates(&self.run.run_id)?;
                updates.retain(|u| u.node_id == node && seq.is_none_or(|shown| u.seq <= shown));
                let mut inspector = Inspector {
                    input: Some(store.attempt_input(&self.run.run_id, &id)?),
                    attempt: Some(attempt),
                    requests: store.attempt_requests(&id)?,
                    effects: store.attempt_effects(&self.run.run_id, &id)?,
                    updates,
                    events_dropped: store.events_dropped(&self.run.run_id)?,
                };
                if let Some(i) = self.history {
                    // The events after the one shown are all loaded (newest first, up to it).
                    undo_later_events(&mut inspector, &self.events[..i]);
                }
                inspector
            }
            None => Inspector::default(),
        };
        Ok(())
    }

    pub fn selected_node(&self) -> Option<&str> {
        self.nodes.get(self.selected).map(|n| n.node_id.as_str())
    }

    /// Selects another node and reads its inspector.
    pub fn move_node(&mut self, store: &Store, delta: isize) -> StoreResult<()> {
        self.selected = step(self.selected, delta, self.nodes.len());
        self.load_inspector(store)
    }

    /// The event history shows, when stepping through it.
    pub fn shown_event(&self) -> Option<&EventRecord> {
        self.history.and_then(|i| self.events.get(i))
    }

    /// One event back in history (from live: the newest), loading older events as needed.
    pub fn history_back(&mut self, store: &Store) -> StoreResult<()> {
        let next = self.history.map_or(0, |i| i + 1);
        if next >= self.events.len() && self.older_events.is_some() {
            self.load_older(store)?;
        }
        if next < self.events.len() {
            self.history = Some(next);
            self.select_event_node(store)?;
        }
        Ok(())
    }

    /// One event forward; past the newest, back to live.
    pub fn history_forward(&mut self, store: &Store) -> StoreResult<()> {
        self.history = match self.history {
            Some(0) | None => None,
            Some(i) => Some(i - 1),
        };
        self.select_event_node(store)
    }

    pub fn live(&mut self, store: &Store) -> StoreResult<()> {
        self.history = None;
        self.select_event_node(store)
    }

    /// Draws the nodes as they were after the event shown (or as they are, live) and selects
    /// the node the event is about (live, the current node).
    fn select_event_node(&mut self, store: &Store) -> StoreResult<()> {
        self.place_nodes(store)?;
        let target = match self.shown_event() {
            Some(event) => event_node(event).map(str::to_owned),
            None => self.run.current_node.clone(),
        };
        if let Some(i) = target.and_then(|t| self.nodes.iter().position(|n| n.node_id == t)) {
            self.selected = i;
        }
        self.selected = self.selected.min(self.nodes.len().saturating_sub(1));
        self.load_inspector(store)
    }

    /// The current node's latest progress message (`worker.progress`), from the loaded
    /// events: the newest `progress` event since the run last moved to a node (in history,
    /// as of the event shown).
    pub fn current_progress(&self) -> Option<&str> {
        let open = match self.history {
            None => matches!(self.run.status, RunStatus::Running | RunStatus::Waiting),
            Some(_) => self.nodes.iter().any(|n| {
                n.is_current
                    && n.activity
                        .as_ref()
                        .is_some_and(|a| matches!(a.last_status.as_str(), "running" | "waiting"))
            }),
        };
        if !open {
            return None;
        }
        for event in self.events.iter().skip(self.history.unwrap_or(0)) {
            match event.kind.as_str() {
                "progress" => return event.data["message"].as_str(),
                "node_started" | "transitioned" => return None,
                _ => {}
            }
        }
        None
    }

    /// The node an event is about, when it names one.
    pub fn highlighted_node(&self) -> Option<&str> {
        match self.shown_event() {
            Some(event) => event_node(event),
            None => self.run.current_node.as_deref(),
        }
    }
}

/// What each node had done just after event `seq`, from the run's attempt spans (as
/// [`Store::node_activity`] reads it now).
pub fn activity_at(spans: &[AttemptSpan], seq: u64) -> Vec<NodeActivity> {
    let mut nodes: Vec<NodeActivity> = Vec::new();
    for span in spans {
        let Some(status) = span.status_at(seq) else {
            continue;
        };
        let i = match nodes.iter().position(|n| n.node_id == span.node_id) {
            Some(i) => i,
            None => {
                nodes.push(NodeActivity {
                    node_id: span.node_id.clone(),
                    visits: 0,
                    last_status: String::new(),
                    last_attempt_id: String::new(),
                    busy_ms: 0,
                    last_started_at: 0,
                });
                nodes.len() - 1
            }
        };
        let node = &mut nodes[i];
        node.visits += 1;
        if !span.open_at(seq) {
            node.busy_ms += span.finished_at.map_or(0, |end| end - span.started_at);
        }
        // Spans come in the order their attempts opened: the last one is the newest.
        node.last_status = status.to_owned();
        node.last_attempt_id = span.attempt_id.clone();
        node.last_started_at = span.started_at;
    }
    nodes.sort_by(|a, b| a.node_id.cmp(&b.node_id));
    nodes
}

/// Takes back from `inspector` what the events after the one shown did (`later`): a request or
/// effect made later is not there yet, a request answered or submitted to later still pending,
/// an effect settled later still applying.
pub fn undo_later_events(inspector: &mut Inspector, later: &[EventRecord]) {
    let named = |kinds: &[&str], field: &str| -> Vec<String> {
        later
            .iter()
            .filter(|e| kinds.contains(&e.kind.as_str()))
            .filter_map(|e| e.data[field].as_str().map(str::to_owned))
            .collect()
    };
    let asked = [
        named(&["waiting"], "decision"),
        named(&["interaction_requested"], "interaction"),
    ]
    .concat();
    let answered = named(&["decision_answered"], "decision");
    let submitted = named(&["submitted"], "interaction");
    inspector.requests.retain(|r| !asked.contains(&r.id));
    for r in &mut inspector.requests {
        if answered.contains(&r.id) || submitted.contains(&r.id) {
            r.status = "pending".into();
            r.answer = None;
            r.answered_by = None;
            r.error = None;
        }
    }
    let reserved = named(&["effect_reserved"], "effect");
    let applying = named(&["effect_applying"], "effect");
    let settled = named(&["effect_settled"], "effect");
    let resolved = named(&["effect_resolved"], "effect");
    inspector
        .effects
        .retain(|e| !reserved.contains(&e.effect_id));
    for e in &mut inspector.effects {
        let state = if applying.contains(&e.effect_id) {
            "reserved"
        } else if settled.contains(&e.effect_id) {
            "applying"
        } else if resolved.contains(&e.effect_id) {
            "uncertain"
        } else {
            continue;
        };
        e.state = state.into();
        e.receipt = None;
    }
}

/// Where the run was just after event `seq`: the node of the newest attempt opened by then.
pub fn current_at(spans: &[AttemptSpan], seq: u64) -> Option<String> {
    spans
        .iter()
        .rfind(|s| s.opened_seq <= seq)
        .map(|s| s.node_id.clone())
}

/// The node an event is about: where a step went, or which node started.
pub fn event_node(event: &EventRecord) -> Option<&str> {
    event.data["to"]
        .as_str()
        .or_else(|| event.data["node"].as_str())
}

/// The nodes in the order a person reads the graph: from the start, following edges (cases in
/// order, the default last), then nodes no edge reaches, then visited nodes the snapshot does
/// not name.
pub fn node_rows(
    graph: Option<&Graph>,
    activity: Vec<NodeActivity>,
    current: Option<&str>,
) -> Vec<NodeRow> {
    let mut order: Vec<String> = Vec::new();
    if let Some(g) = graph {
        let mut queue = std::collections::VecDeque::from([g.start.clone()]);
        while let Some(id) = queue.pop_front() {
            if order.contains(&id) || !g.nodes.contains_key(&id) {
                continue;
            }
            for (_, to) in edge_targets(g.edges.iter().find(|e| e.from == id)) {
                queue.push_back(to);
            }
            order.push(id);
        }
        for id in g.nodes.keys() {
            if !order.contains(id) {
                order.push(id.clone());
            }
        }
    }
    for a in &activity {
        if !order.contains(&a.node_id) {
            order.push(a.node_id.clone());
        }
    }
    let mut activity: std::collections::HashMap<String, NodeActivity> = activity
        .into_iter()
        .map(|a| (a.node_id.clone(), a))
        .collect();
    order
        .into_iter()
        .map(|id| NodeRow {
            kind: graph.and_then(|g| g.nodes.get(&id)).map(|n| n.kind),
            mount: id.rsplit_once('.').map(|(m, _)| m.to_owned()),
            activity: activity.remove(&id),
            next: graph
                .map(|g| edge_targets(g.edges.iter().find(|e| e.from == id)))
                .unwrap_or_default(),
            is_current: current == Some(id.as_str()),
            node_id: id,
        })
        .collect()
}

/// Where an edge leads: `(None, to)` for an unconditional edge, `(Some(case), to)` for each case
/// of a switch and `(Some("*"), to)` for its default.
pub fn edge_targets(edge: Option<&Edge>) -> Vec<(Option<String>, String)> {
    let Some(edge) = edge else {
        return Vec::new();
    };
    let mut out: Vec<(Option<String>, String)> = Vec::new();
    if let Some(to) = &edge.to {
        out.push((None, to.clone()));
    }
    if let Some(switch) = &edge.switch {
        for (case, to) in &switch.cases {
            out.push((Some(case.clone()), to.clone()));
        }
        if let Some(to) = &switch.default {
            out.push((Some("*".into()), to.clone()));
        }
    }
    out
}

fn step(index: usize, delta: isize, len: usize) -> usize {
    if len == 0 {
        return 0;
    }
    index.saturating_add_signed(delta).min(len - 1)
}

/// "3s", "4m", "2h", "5d": how long ago (or how long), coarse, for narrow columns.
pub fn short_duration(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..=59 => format!("{s}s"),
        60..=3599 => format!("{}m", s / 60),
        3600..=86_399 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86_400),
    }
}

/// A duration with milliseconds below ten seconds ("1.25s", "840ms"), coarse above.
pub fn precise_duration(ms: i64) -> String {
    match ms {
        ..=0 => "0ms".into(),
        1..=999 => format!("{ms}ms"),
        1000..=9_999 => format!("{:.2}s", ms as f64 / 1000.0),
        _ => short_duration(ms),
    }
}

/// The time the viewer calls "now" (a test passes its own).
pub fn now_ms() -> UnixMillis {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}
