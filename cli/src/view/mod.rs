//! `piw view`: a live, read-only viewer of runs, and `piw run graph`.
//!
//! `model` reads what a screen shows from a store opened read-only; `render` lays it out with
//! ratatui widgets; this module holds the state between keys and the thin terminal loop. The
//! viewer never starts a host and never writes: it works while the host is down. It follows
//! the run on screen through the host's events while a host answers (`live`), and otherwise
//! (and on the run list) checks SQLite's `data_version` every [`POLL`]: one cheap read that
//! moves when any other connection commits.
//!
//! ```text
//! Store::open_read_only ─► model (RunsModel: a page of runs; RunModel: run, graph snapshot,
//!    │                        node rows from Store::node_activity (in history replayed from
//!    │                        Store::attempt_history), inspector of one attempt,
//!    │                        a window of events, more loaded as history steps back)
//!    │                   ─► render (ratatui widgets; pure: TestBackend in tests, a Buffer
//!    │                        printed as text for --once)   export (dot, mermaid)
//!    ▼
//! mod.rs: App (keys → model), the terminal loop (crossterm); live.rs: what wakes it: keys
//! (a thread), the shown run's events while a host answers (a subscription;
//! BlockingClient::connect never starts one), else PRAGMA data_version; value.rs: `v` reads a
//! stored value whole (value.get, else Store::read_value)
//! ```

pub mod export;
mod live;
pub mod model;
pub mod render;
pub mod value;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use piw_host::clock::UnixMillis;
use piw_host::paths::PiwPaths;
use piw_host::store::{RunFilter, Store, StoreConfig, StoreError, StoreResult};
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::crossterm::event::{Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::Terminal;

use model::{RunModel, RunsModel};
use render::{Screen, Theme};
use value::{PaneBody, StoreValues, ValuePane, ValueSource, ValueText};

/// How often the live viewer checks the database for changes (and redraws ages).
pub const POLL: Duration = Duration::from_millis(250);

/// The size of a `--once` frame when stdout is not a terminal.
pub const ONCE_SIZE: (u16, u16) = (100, 40);

#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("no piw state database at {0} (no run was ever started in this installation)")]
    NoDatabase(PathBuf),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("terminal: {0}")]
    Terminal(#[from] std::io::Error),
}

/// Opens the installation's database read-only (never creating it, never starting a host).
pub fn open_store(paths: &PiwPaths) -> Result<Store, ViewError> {
    if !paths.db.exists() {
        return Err(ViewError::NoDatabase(paths.db.clone()));
    }
    crate::warn_if_linked(paths);
    Ok(Store::open_read_only(&paths.db, StoreConfig::default())?)
}

/// The viewer's state between keys: the run list, the run opened from it (or named), and a
/// value stored apart opened from the run's inspector.
pub struct App {
    pub runs: RunsModel,
    pub run: Option<RunModel>,
    pub value: Option<ValuePane>,
    /// Where `v` reads a value stored apart (the read-only store unless told otherwise).
    pub values: Arc<dyn ValueSource>,
    /// The screen's columns and rows, which the value pane scrolls by.
    pub size: (u16, u16),
    pub quit: bool,
}

impl App {
    pub fn load(store: &Store, filter: RunFilter, run_id: Option<&str>) -> StoreResult<Self> {
        let mut runs = RunsModel::load(store, filter)?;
        let run = match run_id {
            Some(id) => {
                let model = RunModel::load(store, id)?;
                if let Some(i) = runs.rows.iter().position(|r| r.run_id == id) {
                    runs.selected = i;
                }
                Some(model)
            }
            None => None,
        };
        Ok(Self {
            runs,
            run,
            value: None,
            values: Arc::new(StoreValues),
            size: ONCE_SIZE,
            quit: false,
        })
    }

    pub fn screen(&self) -> Screen<'_> {
        match (&self.value, &self.run) {
            (Some(pane), Some(_)) => Screen::Value(pane),
            (_, Some(run)) => Screen::Run(run),
            (_, None) => Screen::Runs(&self.runs),
        }
    }

    /// Opens the run view's `index`th value stored apart (wrapping), to be fetched.
    fn open_value(&mut self, index: usize) {
        let Some(run) = &self.run else {
            return;
        };
        let stored = value::stored_values(run);
        if stored.is_empty() {
            return;
        }
        let index = index % stored.len();
        self.value = Some(ValuePane {
            value: stored[index].clone(),
            index,
            count: stored.len(),
            body: PaneBody::Fetching,
        });
    }

    /// The value asked for and not fetched yet: its run and reference.
    pub fn pending_fetch(&self) -> Option<(String, piw_host::protocol::ValueRef)> {
        let (Some(pane), Some(run)) = (&self.value, &self.run) else {
            return None;
        };
        (pane.body == PaneBody::Fetching)
            .then(|| (run.run.run_id.clone(), pane.value.reference.clone()))
    }

    /// A fetch's outcome: shown when the pane still waits for that value (a failure as a
    /// line), dropped when the pane was closed or moved on.
    pub fn value_fetched(&mut self, sha256: &str, result: Result<ValueText, String>) {
        if let Some(pane) = &mut self.value {
            if pane.body == PaneBody::Fetching && pane.value.reference.sha256 == sha256 {
                pane.body = match result {
                    Ok(text) => PaneBody::Fetched(text),
                    Err(why) => PaneBody::Failed(why),
                };
            }
        }
    }

    /// Fetches the value asked for here and now (the terminal loop does it on a thread).
    #[cfg(test)]
    pub fn fetch_value(&mut self, store: &Store) {
        if let Some((run_id, reference)) = self.pending_fetch() {
            let result = fetch_text(self.values.as_ref(), store, &run_id, &reference);
            self.value_fetched(&reference.sha256, result);
        }
    }

    /// A key while the value pane is open.
    fn value_key(&mut self, code: KeyCode) {
        let (width, rows) = value::pane_inner(self.size.0, self.size.1);
        let Some(pane) = &mut self.value else {
            return;
        };
        let next = pane.index + 1;
        let text = match &mut pane.body {
            PaneBody::Fetched(text) => Some(text),
            _ => None,
        };
        match (code, text) {
            (KeyCode::Esc | KeyCode::Backspace, _) => self.value = None,
            (KeyCode::Char('v'), _) => self.open_value(next),
            (KeyCode::Up | KeyCode::Char('k'), Some(t)) => t.up(1, width),
            (KeyCode::Down | KeyCode::Char('j'), Some(t)) => t.down(1, width, rows),
            (KeyCode::PageUp, Some(t)) => t.up(rows.saturating_sub(1).max(1), width),
            (KeyCode::PageDown, Some(t)) => t.down(rows.saturating_sub(1).max(1), width, rows),
            (KeyCode::Home, Some(t)) => t.home(),
            (KeyCode::End, Some(t)) => t.end(width, rows),
            _ => {}
        }
    }

    /// Reads everything shown again (the database changed).
    pub fn reload(&mut self, store: &Store) -> StoreResult<()> {
        self.runs.reload(store)?;
        if let Some(run) = &mut self.run {
            run.reload(store)?;
        }
        Ok(())
    }

    /// One key. Unknown keys do nothing.
    pub fn key(&mut self, store: &Store, code: KeyCode) -> StoreResult<()> {
        if matches!(code, KeyCode::Char('q')) {
            self.quit = true;
            return Ok(());
        }
        if self.value.is_some() {
            self.value_key(code);
            return Ok(());
        }
        match &mut self.run {
            None => match code {
                KeyCode::Up | KeyCode::Char('k') => self.runs.move_by(store, -1)?,
                KeyCode::Down | KeyCode::Char('j') => self.runs.move_by(store, 1)?,
                KeyCode::PageUp => self.runs.move_by(store, -10)?,
                KeyCode::PageDown => self.runs.move_by(store, 10)?,
                KeyCode::Home => self.runs.selected = 0,
                KeyCode::End => self.runs.selected = self.runs.rows.len().saturating_sub(1),
                KeyCode::Enter => {
                    if let Some(id) = self.runs.selected_run().map(str::to_owned) {
                        self.run = Some(RunModel::load(store, &id)?);
                    }
                }
                KeyCode::Char('s') => {
                    self.runs.cycle_status();
                    self.runs.reload(store)?;
                }
                KeyCode::Char('e') => {
                    self.runs.toggle_session();
                    self.runs.reload(store)?;
                }
                _ => {}
            },
            Some(run) => match code {
                KeyCode::Up | KeyCode::Char('k') => run.move_node(store, -1)?,
                KeyCode::Down | KeyCode::Char('j') => run.move_node(store, 1)?,
                KeyCode::Left | KeyCode::Char('h') => run.history_back(store)?,
                KeyCode::Right | KeyCode::Char('l') => run.history_forward(store)?,
                KeyCode::End => run.live(store)?,
                KeyCode::Char('v') => self.open_value(0),
                KeyCode::Esc | KeyCode::Backspace => {
                    self.run = None;
                    self.runs.reload(store)?;
                }
                _ => {}
            },
        }
        Ok(())
    }
}

/// A value read whole and laid out as pretty JSON.
pub fn fetch_text(
    source: &dyn ValueSource,
    store: &Store,
    run_id: &str,
    reference: &piw_host::protocol::ValueRef,
) -> Result<ValueText, String> {
    source
        .fetch(store, run_id, reference)
        .map(|v| ValueText::new(&v))
}

/// Draws one frame of `app` into a buffer of `width` x `height`.
pub fn frame(
    app: &App,
    theme: Theme,
    now: UnixMillis,
    width: u16,
    height: u16,
) -> std::io::Result<Buffer> {
    let mut terminal = Terminal::new(TestBackend::new(width, height))?;
    terminal.draw(|f| render::draw(f, app.screen(), theme, now))?;
    Ok(terminal.backend().buffer().clone())
}

/// A buffer as plain text: its rows, trailing spaces cut.
pub fn buffer_text(buffer: &Buffer) -> String {
    let area = buffer.area;
    let mut out = String::new();
    for y in area.top()..area.bottom() {
        let mut line = String::new();
        let mut skip = 0usize;
        for x in area.left()..area.right() {
            let symbol = buffer[(x, y)].symbol();
            if skip > 0 {
                // The cells a wide character covers.
                skip -= 1;
                continue;
            }
            skip = unicode_width::UnicodeWidthStr::width(symbol).saturating_sub(1);
            line.push_str(symbol);
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `piw view --once`: one plain-text frame (no colour, no terminal codes).
pub fn once(
    paths: &PiwPaths,
    filter: RunFilter,
    run_id: Option<&str>,
    size: (u16, u16),
) -> Result<String, ViewError> {
    let store = open_store(paths)?;
    let app = App::load(&store, filter, run_id)?;
    let buffer = frame(
        &app,
        Theme { color: false },
        model::now_ms(),
        size.0,
        size.1,
    )?;
    Ok(buffer_text(&buffer))
}

/// `piw run graph`.
pub fn graph(
    paths: &PiwPaths,
    run_id: &str,
    format: export::GraphFormat,
) -> Result<String, ViewError> {
    let store = open_store(paths)?;
    let model = RunModel::load(&store, run_id)?;
    Ok(export::render(&model, format))
}

/// `piw view`: the full-screen viewer until `q`.
pub fn interactive(
    paths: &PiwPaths,
    filter: RunFilter,
    run_id: Option<&str>,
) -> Result<(), ViewError> {
    let store = open_store(paths)?;
    let mut app = App::load(&store, filter, run_id)?;
    app.values = Arc::new(value::HostValues {
        paths: paths.clone(),
    });
    let theme = Theme::from_env();
    let mut terminal = ratatui::try_init()?;
    let result = event_loop(&mut terminal, paths, &store, &mut app, theme);
    ratatui::try_restore()?;
    result
}

fn event_loop(
    terminal: &mut ratatui::DefaultTerminal,
    paths: &PiwPaths,
    store: &Store,
    app: &mut App,
    theme: Theme,
) -> Result<(), ViewError> {
    let (tx, rx) = std::sync::mpsc::channel();
    live::forward_terminal(tx.clone());
    let mut subscription: Option<live::RunSubscription> = None;
    // The value a thread is fetching, so a pane asked for again does not fetch it twice.
    let mut fetching: Option<String> = None;
    let mut seen_version = store.data_version()?;
    while !app.quit {
        // Follow the run on screen through the host's events while one answers.
        let shown = app.run.as_ref().map(|r| r.run.run_id.as_str());
        if subscription.as_ref().map(|s| s.run_id.as_str()) != shown {
            subscription = shown
                .map(|id| live::RunSubscription::start(paths.clone(), id.to_owned(), tx.clone()));
        }
        let size = terminal.size()?;
        app.size = (size.width, size.height);
        terminal.draw(|f| render::draw(f, app.screen(), theme, model::now_ms()))?;
        if let Some((run_id, reference)) = app.pending_fetch() {
            if fetching.as_ref() != Some(&reference.sha256) {
                fetching = Some(reference.sha256.clone());
                live::fetch_value(
                    paths.clone(),
                    app.values.clone(),
                    run_id,
                    reference,
                    tx.clone(),
                );
            }
        }
        // Sleep until a key or an event, at most one poll interval: no busy loop.
        let mut changed = false;
        match live::next(&rx, POLL) {
            Some(live::Wake::Terminal(Event::Key(key))) if key.kind != KeyEventKind::Release => {
                if key.modifiers.contains(KeyModifiers::CONTROL) && key.code == KeyCode::Char('c') {
                    app.quit = true;
                } else {
                    app.key(store, key.code)?;
                }
            }
            Some(live::Wake::Terminal(_)) | None => {}
            Some(live::Wake::RunChanged) => changed = true,
            Some(live::Wake::ValueFetched { sha256, result }) => {
                if fetching.as_ref() == Some(&sha256) {
                    fetching = None;
                }
                app.value_fetched(&sha256, result);
            }
            Some(live::Wake::TerminalFailed(e)) => return Err(e.into()),
        }
        let version = store.data_version()?;
        if changed || version != seen_version {
            seen_version = version;
            app.reload(store)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
