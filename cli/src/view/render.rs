//! The viewer's layout: ratatui widgets drawn from the model. Pure drawing into a frame, so
//! tests draw on ratatui's `TestBackend` and `--once` prints the same frame as text.
//!
//! Nothing depends on colour: every state is a word or a marker (`✓` ok, `✗` failed,
//! `▶` running, `?` waiting, `⧖` timed out, `↺` interrupted, `⊘` cancelled, `·` not visited;
//! `>` marks the selected row, `▸` the current node or the one the event shown is about);
//! colour and reverse video only repeat it, and `NO_COLOR` turns colour off.

use piw_host::clock::UnixMillis;
use piw_host::store::{EventRecord, MessageRecord, RunStatus};
use ratatui::layout::{Constraint, Flex, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Paragraph, Row, Table, TableState, Wrap};
use ratatui::Frame;
use serde_json::Value;
use unicode_width::UnicodeWidthStr as _;

use super::model::{event_node, precise_duration, short_duration, NodeRow, RunModel, RunsModel};
use super::value::{PaneBody, ValuePane};

/// How the viewer styles text: colour only when the terminal may have it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Theme {
    pub color: bool,
}

impl Theme {
    /// Colour unless `NO_COLOR` is set (to anything but the empty string: no-color.org).
    pub fn from_env() -> Self {
        Self {
            color: std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty()),
        }
    }

    fn fg(self, color: Color) -> Style {
        if self.color {
            Style::default().fg(color)
        } else {
            Style::default()
        }
    }

    fn status(self, status: &str) -> Style {
        self.fg(match status {
            "completed" | "ok" | "applied" | "answered" | "accepted" => Color::Green,
            "failed" | "timed_out" | "review" | "rejected" | "uncertain" => Color::Red,
            "running" | "validating" | "applying" => Color::Cyan,
            "waiting" | "pending" => Color::Yellow,
            _ => Color::Reset,
        })
    }
}

/// What the whole screen shows.
pub enum Screen<'a> {
    Runs(&'a RunsModel),
    Run(&'a RunModel),
    /// A value stored apart, opened from the run's inspector.
    Value(&'a ValuePane),
}

/// Draws one frame: the screen, then the footer with its keys.
pub fn draw(frame: &mut Frame<'_>, screen: Screen<'_>, theme: Theme, now: UnixMillis) {
    let [body, footer] =
        Layout::vertical([Constraint::Min(3), Constraint::Length(1)]).areas(frame.area());
    let keys = match screen {
        Screen::Runs(runs) => {
            draw_runs(frame, body, runs, theme, now);
            "↑↓ move  ⏎ open  s status  e session  q quit"
        }
        Screen::Run(run) => {
            draw_run(frame, body, run, theme, now);
            if super::value::stored_values(run).is_empty() {
                "↑↓ node  ←→ history  End live  Esc runs  q quit"
            } else {
                "↑↓ node  ←→ history  End live  v value  Esc runs  q quit"
            }
        }
        Screen::Value(pane) => {
            draw_value(frame, body, pane);
            "↑↓ PgUp PgDn Home End scroll  v next value  Esc run  q quit"
        }
    };
    frame.render_widget(
        Paragraph::new(keys).style(Style::default().add_modifier(Modifier::REVERSED)),
        footer,
    );
}

fn draw_runs(frame: &mut Frame<'_>, area: Rect, runs: &RunsModel, theme: Theme, now: UnixMillis) {
    let filter = format!(
        "status {} · session {}",
        runs.filter.status.map_or("all", |s| s.as_str()),
        runs.filter.session.as_deref().unwrap_or("all")
    );
    let title = format!(
        " piw runs: {} of {} · {filter} ",
        runs.rows.len(),
        runs.total
    );
    let header = Row::new(["STATUS", "WORKFLOW", "SESSION", "NODE", "AGE", "RUN"])
        .style(Style::default().add_modifier(Modifier::BOLD));
    let widths = [
        Constraint::Length(11),
        Constraint::Fill(2),
        Constraint::Fill(2),
        Constraint::Fill(2),
        Constraint::Length(4),
        // Short ids (`piw runs` shows them too), whole, so they can be copied: any command
        // takes one.
        Constraint::Length(
            runs.rows
                .iter()
                .map(|r| runs.short_id(&r.run_id).len())
                .max()
                .map_or(3, |w| u16::try_from(w).unwrap_or(u16::MAX).max(3)),
        ),
    ];
    // The columns as the table lays them out (inside the border, after the `> ` of the
    // selection), so a cell too long for its column is cut with `…` rather than silently.
    let columns: Vec<u16> = Layout::horizontal(widths)
        .flex(Flex::Start)
        .spacing(1)
        .split(Rect::new(0, 0, area.width.saturating_sub(2 + 2), 1))
        .iter()
        .map(|c| c.width)
        .collect();
    let cut = |i: usize, text: String| fit_text(&text, columns.get(i).copied().unwrap_or(0));
    let rows = runs.rows.iter().map(|r| {
        let mut status = r.status.as_str().to_owned();
        if r.paused {
            status.push_str(" (paused)");
        }
        Row::new([
            Cell::from(cut(0, status)).style(theme.status(r.status.as_str())),
            Cell::from(cut(1, r.workflow_name.clone())),
            Cell::from(cut(
                2,
                r.origin_session.clone().unwrap_or_else(|| "-".into()),
            )),
            Cell::from(cut(3, r.current_node.clone().unwrap_or_else(|| "-".into()))),
            Cell::from(cut(4, short_duration(now - r.created_at))),
            Cell::from(runs.short_id(&r.run_id).to_owned()),
        ])
    });
    let table = Table::new(rows, widths)
        .header(header)
        .block(Block::bordered().title(fit_text(&title, area.width.saturating_sub(2))))
        .row_highlight_style(Style::default().add_modifier(Modifier::REVERSED))
        .highlight_symbol("> ");
    let mut state =
        TableState::default().with_selected((!runs.rows.is_empty()).then_some(runs.selected));
    if runs.rows.is_empty() {
        let empty =
            Paragraph::new("no runs").block(Block::bordered().title(title_str(&runs.filter)));
        frame.render_widget(empty, area);
    } else {
        frame.render_stateful_widget(table, area, &mut state);
    }
}

fn title_str(filter: &piw_host::store::RunFilter) -> String {
    format!(
        " piw runs · status {} · session {} ",
        filter.status.map_or("all", |s| s.as_str()),
        filter.session.as_deref().unwrap_or("all")
    )
}

fn draw_run(frame: &mut Frame<'_>, area: Rect, m: &RunModel, theme: Theme, now: UnixMillis) {
    let wide = area.width >= 100;
    let [graph_width, inspector_width] = Layout::horizontal([
        Constraint::Percentage(if wide { 45 } else { 50 }),
        Constraint::Fill(1),
    ])
    .areas(Rect::new(0, 0, area.width, 1))
    .map(|r| r.width.saturating_sub(2));
    // The events get the rows the graph and the inspector do not need (at least a few, at
    // most what there is to list), so a short run's first event is not hidden below empty
    // panels.
    let (graph, _) = graph_lines(m, theme, now, graph_width);
    let middle_needed = (graph.len() + 2)
        .max(inspector(m, now).line_count(inspector_width))
        .max(4);
    let below_head = usize::from(area.height.saturating_sub(2));
    let least = if area.height >= 30 { 10 } else { 6 };
    let listed = if m.older_events.is_some() {
        usize::MAX
    } else {
        m.events.len() + 2
    };
    let events_height = listed.min(below_head.saturating_sub(middle_needed).max(least));
    let [head, middle, events] = Layout::vertical([
        Constraint::Length(2),
        Constraint::Min(4),
        Constraint::Length(u16::try_from(events_height).unwrap_or(u16::MAX)),
    ])
    .areas(area);
    let head_lines = header_lines(m, theme, now)
        .into_iter()
        .map(|l| fit_line(l, head.width))
        .collect::<Vec<_>>();
    frame.render_widget(Paragraph::new(head_lines), head);
    let [graph_area, inspector_area] = Layout::horizontal([
        Constraint::Percentage(if wide { 45 } else { 50 }),
        Constraint::Fill(1),
    ])
    .areas(middle);
    draw_graph(frame, graph_area, m, theme, now);
    frame.render_widget(inspector(m, now), inspector_area);
    draw_events(frame, events, m);
}

/// ` · wakes in 2 h (14:05:00)` for a run waiting on a durable timer; empty otherwise.
fn wake_note(wake_at: Option<UnixMillis>, now: UnixMillis) -> String {
    wake_at.map_or_else(String::new, |at| {
        let then = u64::try_from(at).unwrap_or(0);
        let now = u64::try_from(now).unwrap_or(0);
        format!(
            " · wakes {} ({})",
            crate::human::until(then, now),
            clock_time(at)
        )
    })
}

fn header_lines(m: &RunModel, theme: Theme, now: UnixMillis) -> Vec<Line<'static>> {
    let r = &m.run;
    let mut status = r.status.as_str().to_owned();
    if r.paused {
        status.push_str(" (paused)");
    }
    let mut facts = vec![r.workflow_name.clone(), r.run_id.clone()];
    if let Some(session) = &r.origin_session {
        facts.push(format!("session {session}"));
    }
    // Its steps go to the host's Pi children, not to a session.
    if r.execution_mode == "detached" {
        facts.push("detached".into());
    }
    facts.push(format!("rev {}", r.revision));
    facts.push(format!("{} ago", short_duration(now - r.created_at)));
    let first = Line::from(vec![
        Span::styled(
            status.to_uppercase(),
            theme.status(r.status.as_str()).add_modifier(Modifier::BOLD),
        ),
        Span::raw(format!(" · {}", facts.join(" · "))),
    ]);
    let second = match m.shown_event() {
        Some(e) => Line::from(format!(
            "HISTORY event {} of {}: {} at {} (End: live)",
            e.seq,
            r.revision,
            e.kind,
            clock_time(e.at)
        ))
        .style(Style::default().add_modifier(Modifier::BOLD)),
        None => match (&r.error, &r.review_reason, r.status) {
            (Some(error), _, _) => Line::from(format!("error: {}", one_line(error))),
            (_, Some(reason), RunStatus::Review) => {
                Line::from(format!("review: {}", one_line(reason)))
            }
            _ => match (&r.result, r.status) {
                (Some(result), RunStatus::Completed) => {
                    Line::from(format!("result: {}", compact(result)))
                }
                _ => Line::from(format!(
                    "live · current node {}{}",
                    r.current_node.as_deref().unwrap_or("-"),
                    wake_note(r.wake_at, now)
                )),
            },
        },
    };
    vec![first, second]
}

/// The marker of an attempt status (see the module doc).
pub fn status_marker(status: Option<&str>) -> &'static str {
    match status {
        Some("ok") => "✓",
        Some("failed") => "✗",
        Some("running") => "▶",
        Some("waiting") => "?",
        Some("timed_out") => "⧖",
        Some("interrupted") => "↺",
        Some("cancelled") => "⊘",
        Some(_) => "•",
        None => "·",
    }
}

/// The graph panel's lines and the line of the selected node: each node a box (its id, state
/// marker and word, visits, time, the `◀` of the current node), and under it its arrows: `▼`
/// to the one next node, `├─ case ─▶ node` for each case of a switch, `■ end` for none. The
/// boxes share one width, so they read as a column. Nothing depends on colour: `>` marks the
/// selected node and `▸` the highlighted one, beside its box.
pub fn graph_lines(
    m: &RunModel,
    theme: Theme,
    now: UnixMillis,
    width: u16,
) -> (Vec<Line<'static>>, usize) {
    // In history, how long an open attempt had run or waited is counted to the event shown.
    let now = m.shown_event().map_or(now, |e| e.at);
    let mut lines = Vec::new();
    let mut selected_line = 0;
    let highlighted = m.highlighted_node();
    let contents: Vec<Line<'static>> = m
        .nodes
        .iter()
        .map(|node| {
            // A box and its margins take six columns around what it says.
            let room = usize::from(width).saturating_sub(6);
            node_line(node, highlighted == Some(&node.node_id), theme, now, room)
        })
        .collect();
    let inner = contents.iter().map(Line::width).max().unwrap_or(0) + 2;
    let mut mount: Option<&str> = None;
    for (i, (node, content)) in m.nodes.iter().zip(contents).enumerate() {
        if node.mount.as_deref() != mount {
            mount = node.mount.as_deref();
            if let Some(name) = mount {
                lines.push(Line::from(format!("┄┄ included workflow {name} ┄┄")));
            }
        }
        let selected = i == m.selected;
        let pointer = if highlighted == Some(&node.node_id) {
            "▸"
        } else {
            " "
        };
        let selection = if selected { ">" } else { " " };
        lines.push(Line::from(format!("  ┌{}┐", "─".repeat(inner))));
        if selected {
            selected_line = lines.len();
        }
        let pad = inner.saturating_sub(content.width() + 1);
        let mut spans = vec![Span::raw(format!("{selection}{pointer}│ "))];
        spans.extend(content.spans);
        spans.push(Span::raw(format!("{}│", " ".repeat(pad))));
        let line = Line::from(spans);
        lines.push(if selected {
            line.style(Style::default().add_modifier(Modifier::REVERSED))
        } else {
            line
        });
        lines.push(Line::from(format!("  └{}┘", "─".repeat(inner))));
        if node.is_current {
            if let Some(progress) = m.current_progress() {
                lines.push(Line::from(format!("     ⋯ {}", one_line(progress))));
            }
        }
        match node.next.as_slice() {
            [] => lines.push(Line::from("     ■ end")),
            [(None, to)] => lines.push(Line::from(format!("     ▼ {to}"))),
            edges => {
                for (n, (case, to)) in edges.iter().enumerate() {
                    let branch = if n + 1 == edges.len() { "└" } else { "├" };
                    let case = case.as_deref().unwrap_or("*");
                    lines.push(Line::from(format!("     {branch}─ {case} ─▶ {to}")));
                }
            }
        }
    }
    (lines, selected_line)
}

/// What a node's box says: its state marker, `[id]`, status word, visits and time: while its
/// newest attempt runs or waits, how long it has so far (as the inspector counts it), else the
/// time its attempts took.
fn node_line(
    node: &NodeRow,
    highlighted: bool,
    theme: Theme,
    now: UnixMillis,
    room: usize,
) -> Line<'static> {
    let status = node.activity.as_ref().map(|a| a.last_status.as_str());
    let id = format!("[{}]", node.node_id);
    let mut spans = vec![
        Span::raw(format!("{} ", status_marker(status))),
        Span::styled(
            id.clone(),
            if highlighted {
                Style::default().add_modifier(Modifier::BOLD)
            } else {
                Style::default()
            },
        ),
    ];
    match &node.activity {
        Some(a) => {
            spans.push(Span::styled(
                format!(" {}", a.last_status),
                theme.status(&a.last_status),
            ));
            let time = match a.last_status.as_str() {
                "running" | "waiting" => now - a.last_started_at,
                _ => a.busy_ms,
            };
            spans.push(Span::raw(format!(
                " ×{} {}",
                a.visits,
                precise_duration(time)
            )));
        }
        None => spans.push(Span::raw(" not visited")),
    }
    if node.is_current {
        spans.push(Span::styled(
            " ◀",
            Style::default().add_modifier(Modifier::BOLD),
        ));
    }
    // Too wide for the panel: the status word gives way first (the marker says it too), then
    // the id (`[repair.ver…]`), so the time and the current node's `◀` stay in view.
    let line = Line::from(spans.clone());
    if line.width() <= room {
        return line;
    }
    if node.activity.is_some() {
        spans.remove(2);
    }
    let over = Line::from(spans.clone()).width().saturating_sub(room);
    if over == 0 {
        return Line::from(spans);
    }
    let id_room = id.width().saturating_sub(over).max(3);
    let id_room = u16::try_from(id_room - 1).unwrap_or(u16::MAX);
    spans[1].content = format!("{}]", fit_text(&id[..id.len() - 1], id_room)).into();
    fit_line(Line::from(spans), u16::try_from(room).unwrap_or(u16::MAX))
}

fn draw_graph(frame: &mut Frame<'_>, area: Rect, m: &RunModel, theme: Theme, now: UnixMillis) {
    let (mut lines, selected_line) = graph_lines(m, theme, now, area.width.saturating_sub(2));
    if lines.is_empty() {
        lines.push(Line::from(
            "no graph snapshot yet (the run has not started)",
        ));
    }
    if let Some(error) = &m.graph_error {
        lines.insert(0, Line::from(format!("snapshot unreadable: {error}")));
    }
    let inner_height = area.height.saturating_sub(2) as usize;
    // Keep the selected node's box (and its first arrow line) in view.
    let scroll = (selected_line + 3).saturating_sub(inner_height);
    let title = m
        .graph
        .as_ref()
        .map_or(" graph ".to_owned(), |g| format!(" graph {} ", g.name));
    let title = fit_text(&title, area.width.saturating_sub(2));
    let inner_width = area.width.saturating_sub(2);
    let lines: Vec<Line<'static>> = lines
        .into_iter()
        .map(|l| fit_line(l, inner_width))
        .collect();
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(title))
            .scroll((scroll as u16, 0)),
        area,
    );
}

/// The inspector's text for the selected node (and, in history, the event shown).
pub fn inspector_lines(m: &RunModel, now: UnixMillis) -> Vec<Line<'static>> {
    let mut out: Vec<Line<'static>> = Vec::new();
    if let Some(e) = m.shown_event() {
        out.push(
            Line::from(format!(
                "event {} {} at {}",
                e.seq,
                e.kind,
                clock_time(e.at)
            ))
            .style(Style::default().add_modifier(Modifier::BOLD)),
        );
        out.push(Line::from(format!("  {}", compact(&e.data))));
    }
    // In history, how long an attempt had run or waited is counted to the event shown.
    let now = m.shown_event().map_or(now, |e| e.at);
    let Some(node) = m.nodes.get(m.selected) else {
        out.push(Line::from("no node selected"));
        return out;
    };
    let kind = node.kind.map_or("?", |k| k.as_str());
    out.push(
        Line::from(format!("node {} ({kind})", node.node_id))
            .style(Style::default().add_modifier(Modifier::BOLD)),
    );
    let Some(a) = &m.inspector.attempt else {
        out.push(Line::from("not visited yet"));
        return out;
    };
    out.push(Line::from(format!(
        "attempt {} of {} · {} · gen {}",
        a.ordinal,
        node.activity.as_ref().map_or(1, |x| x.visits),
        a.status,
        a.generation
    )));
    let took = match a.finished_at {
        Some(end) => format!("took {}", precise_duration(end - a.started_at)),
        None => format!("for {}", precise_duration(now - a.started_at)),
    };
    out.push(Line::from(format!(
        "started {} · {took}",
        clock_time(a.started_at)
    )));
    if let Some(deadline) = a.deadline_at {
        out.push(Line::from(format!("deadline {}", clock_time(deadline))));
    }
    if node.is_current {
        if let Some(progress) = m.current_progress() {
            out.push(Line::from(format!("progress: {}", one_line(progress))));
        }
    }
    if let Some(input) = &m.inspector.input {
        out.push(Line::from(format!("input: {}", compact(input))));
    }
    if let Some(output) = &a.output {
        out.push(Line::from(format!("output: {}", compact(output))));
    }
    if let Some(error) = &a.error {
        out.push(Line::from(format!("error: {}", one_line(error))));
    }
    for r in &m.inspector.requests {
        out.push(Line::from(format!("{} {} · {}", r.kind, r.id, r.status)));
        // What a person reads first: the question, summary or prompt; then the rest.
        let mut request = r.request.clone();
        for key in ["question", "summary", "prompt"] {
            if let Some(Value::String(text)) = request.as_object_mut().and_then(|o| o.remove(key)) {
                out.push(Line::from(format!("  {key}: {}", one_line(&text))));
            }
        }
        if request.as_object().is_none_or(|o| !o.is_empty()) {
            out.push(Line::from(format!("  request: {}", compact(&request))));
        }
        if let Some(answer) = &r.answer {
            let by = r.answered_by.as_deref().unwrap_or("-");
            out.push(Line::from(format!("  answer ({by}): {}", compact(answer))));
        }
        if let Some(error) = &r.error {
            out.push(Line::from(format!("  rejected: {}", one_line(error))));
        }
    }
    for e in &m.inspector.effects {
        out.push(Line::from(format!("effect {} · {}", e.effect_key, e.state)));
        if let Some(receipt) = &e.receipt {
            out.push(Line::from(format!("  receipt: {}", compact(receipt))));
        }
        if let Some(error) = &e.error {
            out.push(Line::from(format!("  error: {}", one_line(error))));
        }
    }
    for u in &m.inspector.updates {
        out.extend(update_lines(u, now));
    }
    if m.inspector.events_dropped > 0 {
        out.push(Line::from(format!(
            "events dropped over the run's budget: {}",
            m.inspector.events_dropped
        )));
    }
    if let Some(child) = &m.child {
        if child.exited {
            let how = match (child.exit_code, child.signal) {
                (Some(code), _) => format!("exit {code}"),
                (None, Some(signal)) => format!("signal {signal}"),
                _ => "exited".into(),
            };
            out.push(Line::from(format!(
                "child: {how}{}",
                child
                    .reason
                    .as_deref()
                    .map(|r| format!(" · {}", one_line(r)))
                    .unwrap_or_default()
            )));
        } else {
            out.push(Line::from(format!(
                "child: pid {} running",
                child.pid.map_or("-".into(), |p| p.to_string())
            )));
        }
        let tail: Vec<&str> = child.stderr_tail.lines().rev().take(3).collect();
        for line in tail.into_iter().rev() {
            out.push(Line::from(format!("  stderr: {line}")));
        }
    }
    out
}

/// An update in the inspector: a `progress` track as its count, status and ETA with the basis
/// of the estimate (samples, source times); another type as its data.
fn update_lines(u: &piw_host::store::UpdateRecord, now: UnixMillis) -> Vec<Line<'static>> {
    let head = format!("update {}:{} at {}", u.update_type, u.key, clock_time(u.at));
    if u.update_type != "progress" || u.data_omitted {
        return vec![
            Line::from(head),
            Line::from(format!("  {}", compact(&u.data))),
        ];
    }
    let d = &u.data;
    let text = |f: &str| d.get(f).and_then(Value::as_str).map(one_line);
    let number = |f: &str| d.get(f).and_then(Value::as_f64);
    let mut line = text("label").unwrap_or_else(|| u.key.clone());
    if let Some(done) = number("completed") {
        line.push_str(&format!(" {done}"));
        if let Some(total) = number("total") {
            line.push_str(&format!("/{total}"));
        }
        if let Some(unit) = text("unit") {
            line.push_str(&format!(" {unit}"));
        }
    }
    line.push_str(&format!(
        " · {}",
        text("status").unwrap_or_else(|| "?".into())
    ));
    if let Some(phase) = text("phase") {
        line.push_str(&format!(" · {phase}"));
    }
    let mut out = vec![Line::from(head), Line::from(format!("  {line}"))];
    let rest = match (number("completed"), number("total")) {
        (Some(done), Some(total)) => Some(total - done),
        _ => None,
    };
    let running = text("status").as_deref() == Some("running");
    match (rest, median_rate(&u.samples)) {
        (Some(rest), Some(rate)) if running && rate > 0.0 => {
            // The remaining work at the median rate of the epoch's intervals, from the last sample.
            let left = (rest / rate) as i64 - (now - u.at).max(0);
            out.push(Line::from(format!(
                "  ETA {} (median of {} intervals)",
                precise_duration(left.max(0)),
                u.samples.len() - 1
            )));
        }
        _ if running => out.push(Line::from(format!(
            "  ETA unavailable ({} samples)",
            u.samples.len()
        ))),
        _ => {}
    }
    for f in ["sourceUpdatedAt", "sourceEstimatedFinishAt"] {
        if let Some(at) = text(f) {
            out.push(Line::from(format!("  {f}: {at}")));
        }
    }
    out
}

/// The median rate (units per ms) of the intervals between samples `[at, completed]`.
fn median_rate(samples: &[(UnixMillis, f64)]) -> Option<f64> {
    let mut rates: Vec<f64> = samples
        .windows(2)
        .filter(|w| w[1].0 > w[0].0)
        .map(|w| (w[1].1 - w[0].1) / (w[1].0 - w[0].0) as f64)
        .collect();
    if rates.is_empty() {
        return None;
    }
    rates.sort_by(f64::total_cmp);
    let mid = rates.len() / 2;
    Some(if rates.len().is_multiple_of(2) {
        (rates[mid - 1] + rates[mid]) / 2.0
    } else {
        rates[mid]
    })
}

/// The inspector panel (wrapped: nothing in it is cut but by [`compact`]).
fn inspector(m: &RunModel, now: UnixMillis) -> Paragraph<'static> {
    Paragraph::new(inspector_lines(m, now))
        .block(Block::bordered().title(" inspector "))
        .wrap(Wrap { trim: false })
}

/// The value pane: the value's pretty JSON, only the rows on screen laid out.
fn draw_value(frame: &mut Frame<'_>, area: Rect, pane: &ValuePane) {
    let (width, rows) = super::value::pane_inner(area.width, area.height + 1);
    let (lines, place) = match &pane.body {
        PaneBody::Fetching => (vec![Line::from("fetching…")], String::new()),
        PaneBody::Failed(why) => (
            vec![Line::from(format!(
                "could not fetch the value: {}",
                one_line(why)
            ))],
            String::new(),
        ),
        PaneBody::Fetched(text) => (
            text.visible(width, rows)
                .into_iter()
                .map(|row| Line::from(row.to_owned()))
                .collect(),
            format!(" · {}%", text.percent()),
        ),
    };
    let v = &pane.value;
    let title = format!(
        " {} · {} bytes{place} · value {} of {} ",
        v.label,
        v.reference.bytes,
        pane.index + 1,
        pane.count
    );
    frame.render_widget(
        Paragraph::new(lines)
            .block(Block::bordered().title(fit_text(&title, area.width.saturating_sub(2)))),
        area,
    );
}

/// One line of the event list; a `notified` event says its message when `messages` has it.
pub fn event_line(e: &EventRecord, messages: &[MessageRecord]) -> String {
    let said = match e.kind.as_str() {
        "notified" => e.data["message"]
            .as_str()
            .and_then(|id| messages.iter().find(|m| m.message_id == id)),
        _ => None,
    };
    let what = match (e.kind.as_str(), said) {
        (_, Some(m)) => message_text(&m.content),
        ("transitioned", _) => format!(
            "{} ─▶ {} ({})",
            e.data["from"].as_str().unwrap_or("?"),
            e.data["to"].as_str().unwrap_or("?"),
            piw_host::protocol::outcome_word(e.data["outcome"].as_str().unwrap_or("?"))
        ),
        ("timer_set" | "timer_fired", _) => format!(
            "wake {}",
            e.data["wake_at"].as_i64().map_or("?".into(), clock_time)
        ),
        _ => match event_node(e) {
            Some(node) => node.to_owned(),
            None => compact(&e.data),
        },
    };
    format!("#{:<4} {} {:<14} {what}", e.seq, clock_time(e.at), e.kind)
}

/// What a workflow message says on one line: a notify node's `{kind, message}` (or a
/// `{text}`) its text, any other content compacted.
fn message_text(content: &Value) -> String {
    let text = [&content["message"], &content["text"]]
        .into_iter()
        .find(|t| t.is_string())
        .unwrap_or(content);
    compact(text)
}

fn draw_events(frame: &mut Frame<'_>, area: Rect, m: &RunModel) {
    let visible = area.height.saturating_sub(2) as usize;
    let cursor = m.history.unwrap_or(0);
    // Newest at the top; the shown event stays in view.
    let start = cursor.saturating_sub(visible.saturating_sub(1));
    let lines: Vec<Line<'static>> = m
        .events
        .iter()
        .enumerate()
        .skip(start)
        .take(visible)
        .map(|(i, e)| {
            let shown = m.history == Some(i);
            let line = fit_line(
                Line::from(format!(
                    "{}{}",
                    if shown { "▸" } else { " " },
                    event_line(e, &m.messages)
                )),
                area.width.saturating_sub(2),
            );
            if shown {
                line.style(Style::default().add_modifier(Modifier::REVERSED))
            } else {
                line
            }
        })
        .collect();
    let title = match m.history {
        Some(_) => " events · history ".to_owned(),
        None => format!(" events · live · {} in all ", m.run.revision),
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(title)),
        area,
    );
}

/// `line` cut to `width` columns; a line that was cut ends in `…`.
pub fn fit_line(line: Line<'static>, width: u16) -> Line<'static> {
    let width = usize::from(width);
    if line.width() <= width {
        return line;
    }
    let room = width.saturating_sub(1);
    let mut used = 0;
    let mut spans: Vec<Span<'static>> = Vec::new();
    for span in &line.spans {
        let mut text = String::new();
        let mut full = false;
        for g in span.styled_graphemes(Style::default()) {
            let w = g.symbol.width();
            if used + w > room {
                full = true;
                break;
            }
            used += w;
            text.push_str(g.symbol);
        }
        spans.push(Span::styled(text, span.style));
        if full {
            break;
        }
    }
    if width > 0 {
        spans.push(Span::raw("…"));
    }
    Line { spans, ..line }
}

/// `text` cut to `width` columns, ending in `…` when it was cut.
pub fn fit_text(text: &str, width: u16) -> String {
    fit_line(Line::from(text.to_owned()), width)
        .spans
        .iter()
        .map(|s| s.content.as_ref())
        .collect()
}

/// A value on one line, cut to keep a panel readable.
pub fn compact(value: &Value) -> String {
    use piw_host::protocol::value::{read_slot, Slot};
    let text = match read_slot(value) {
        // A value stored apart: its start and size (`piw run value` prints it whole).
        Ok(Slot::Reference(r)) => {
            return format!(
                "{}… ({} bytes: piw run value <run> {})",
                one_line(&r.preview),
                r.bytes,
                r.sha256
            )
        }
        Ok(Slot::Inline(Value::String(s))) => s.clone(),
        Ok(Slot::Inline(other)) => other.to_string(),
        Err(_) => value.to_string(),
    };
    one_line(&text)
}

fn one_line(text: &str) -> String {
    const MAX: usize = 300;
    let flat: String = text.replace(['\n', '\r'], " ");
    if flat.chars().count() > MAX {
        let cut: String = flat.chars().take(MAX).collect();
        format!("{cut}…")
    } else {
        flat
    }
}

/// `HH:MM:SS` (UTC) of a time in milliseconds.
pub fn clock_time(ms: UnixMillis) -> String {
    let s = ms.div_euclid(1000).rem_euclid(86_400);
    format!("{:02}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
