//! The value pane: a value stored apart (`{"$piw":"value",...}` in an attempt's output, an
//! effect's receipt, a request, the run's result) fetched whole on request and shown as pretty
//! JSON. A value may be 64 MiB: the pane keeps the text and lays out only the rows on screen,
//! scrolling by byte offset, so a frame costs the same whatever the value's size.
//!
//! The value comes from the host (`value.get` pieces) while one answers, and otherwise from the
//! store the viewer opened read-only.

use std::time::Duration;

use piw_host::client::BlockingClient;
use piw_host::paths::PiwPaths;
use piw_host::protocol::value::{read_slot, Slot};
use piw_host::protocol::ValueRef;
use piw_host::store::Store;
use serde_json::Value;
use unicode_width::UnicodeWidthChar as _;

use super::model::RunModel;

/// How long one `value.get` may wait for the host before the fetch is given up.
const HOST_TIMEOUT: Duration = Duration::from_secs(30);

/// A place of the inspector (or the run's result) that holds a value stored apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredValue {
    /// What the place is: `output`, `effect publish receipt`, `result`.
    pub label: String,
    pub reference: ValueRef,
}

/// The values stored apart that the run view shows, in the inspector's order, then the result.
pub fn stored_values(m: &RunModel) -> Vec<StoredValue> {
    let mut places: Vec<(String, &Value)> = Vec::new();
    if let Some(input) = &m.inspector.input {
        places.push(("input".into(), input));
    }
    if let Some(output) = m.inspector.attempt.as_ref().and_then(|a| a.output.as_ref()) {
        places.push(("output".into(), output));
    }
    for r in &m.inspector.requests {
        places.push((format!("{} {} request", r.kind, r.id), &r.request));
        if let Some(answer) = &r.answer {
            places.push((format!("{} {} answer", r.kind, r.id), answer));
        }
    }
    for e in &m.inspector.effects {
        if let Some(receipt) = &e.receipt {
            places.push((format!("effect {} receipt", e.effect_key), receipt));
        }
    }
    if let Some(result) = &m.run.result {
        places.push(("result".into(), result));
    }
    places
        .into_iter()
        .filter_map(|(label, value)| match read_slot(value) {
            Ok(Slot::Reference(reference)) => Some(StoredValue { label, reference }),
            _ => None,
        })
        .collect()
}

/// Where the viewer reads a value stored apart (on a thread of its own, so keys still work
/// while a large value arrives).
pub trait ValueSource: Send + Sync {
    /// The value `reference` names, which run `run_id` holds, or why it could not be read.
    fn fetch(&self, store: &Store, run_id: &str, reference: &ValueRef) -> Result<Value, String>;
}

/// The store the viewer opened read-only (a stopped installation).
pub struct StoreValues;

impl ValueSource for StoreValues {
    fn fetch(&self, store: &Store, run_id: &str, reference: &ValueRef) -> Result<Value, String> {
        let bytes = store
            .read_value(run_id, &reference.sha256)
            .map_err(|e| e.to_string())?;
        let sha256 = piw_host::ids::sha256_hex(&bytes);
        if sha256 != reference.sha256 {
            return Err(format!(
                "value {} read back as {} bytes hashing to {sha256}",
                reference.sha256,
                bytes.len()
            ));
        }
        serde_json::from_slice(&bytes)
            .map_err(|e| format!("value {} is not JSON: {e}", reference.sha256))
    }
}

/// The host, in `value.get` pieces, while one answers; the store when none does. The viewer
/// never starts a host.
pub struct HostValues {
    pub paths: PiwPaths,
}

impl ValueSource for HostValues {
    fn fetch(&self, store: &Store, run_id: &str, reference: &ValueRef) -> Result<Value, String> {
        let Ok(mut client) = BlockingClient::connect(&self.paths) else {
            return StoreValues.fetch(store, run_id, reference);
        };
        client
            .set_timeout(Some(HOST_TIMEOUT))
            .map_err(|e| e.to_string())?;
        client
            .read_value(run_id, reference)
            .map_err(|e| format!("the host: {e}"))
    }
}

/// The value pane: which value, and its text once fetched (or why not).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValuePane {
    pub value: StoredValue,
    /// Which of the run view's stored values this is (`v` goes on to the next).
    pub index: usize,
    pub count: usize,
    pub body: PaneBody,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PaneBody {
    /// Asked for; the viewer fetches it after drawing the pane once.
    Fetching,
    Fetched(ValueText),
    /// Why it could not be fetched (missing, the host gone): shown as a line.
    Failed(String),
}

/// A value's pretty JSON and the first row on screen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValueText {
    text: String,
    /// The byte offset where the top row starts.
    top: usize,
}

impl ValueText {
    pub fn new(value: &Value) -> Self {
        Self {
            text: serde_json::to_string_pretty(value).unwrap_or_default(),
            top: 0,
        }
    }

    /// How far down the top row is, in percent of the text.
    pub fn percent(&self) -> usize {
        if self.text.is_empty() {
            100
        } else {
            self.top * 100 / self.text.len()
        }
    }

    /// Where the row that starts at `start` ends, `width` columns wide: after its newline, or
    /// at the first character that does not fit (every row takes at least one character).
    fn row_end(&self, start: usize, width: usize) -> usize {
        let mut used = 0;
        for (i, c) in self.text[start..].char_indices() {
            if c == '\n' {
                return start + i + 1;
            }
            let w = c.width().unwrap_or(0);
            if used + w > width && i > 0 {
                return start + i;
            }
            used += w;
        }
        self.text.len()
    }

    /// The `rows` rows from the top, `width` columns wide.
    pub fn visible(&self, width: usize, rows: usize) -> Vec<&str> {
        let mut out = Vec::new();
        let mut at = self.top;
        while out.len() < rows && at < self.text.len() {
            let end = self.row_end(at, width);
            out.push(self.text[at..end].trim_end_matches('\n'));
            at = end;
        }
        out
    }

    /// Scrolls `n` rows down, no further than the last page.
    pub fn down(&mut self, n: usize, width: usize, rows: usize) {
        for _ in 0..n {
            let mut end = self.top;
            for _ in 0..rows.max(1) {
                end = self.row_end(end, width);
            }
            if end >= self.text.len() {
                return;
            }
            self.top = self.row_end(self.top, width);
        }
    }

    /// Scrolls `n` rows up.
    pub fn up(&mut self, n: usize, width: usize) {
        let mut left = n;
        while left > 0 && self.top > 0 {
            // The line holding the row above the top one, laid out into rows up to the top.
            let line_start = self.text.as_bytes()[..self.top - 1]
                .iter()
                .rposition(|b| *b == b'\n')
                .map_or(0, |i| i + 1);
            let mut starts = Vec::new();
            let mut at = line_start;
            while at < self.top {
                starts.push(at);
                at = self.row_end(at, width);
            }
            let take = left.min(starts.len());
            self.top = starts[starts.len() - take];
            left -= take;
        }
    }

    pub fn home(&mut self) {
        self.top = 0;
    }

    /// The last page.
    pub fn end(&mut self, width: usize, rows: usize) {
        self.top = self.text.len();
        self.up(rows.max(1), width);
    }
}

/// The columns and rows the value pane has inside its border on a `width` x `height` screen
/// (the pane fills all but the footer).
pub fn pane_inner(width: u16, height: u16) -> (usize, usize) {
    (
        usize::from(width.saturating_sub(2)).max(1),
        usize::from(height.saturating_sub(3)).max(1),
    )
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;
    use std::os::unix::net::UnixListener;

    use piw_host::protocol::value::chunk_to_hex;
    use piw_host::protocol::{
        encode_frame, read_frame, Limits, Receipt, Request, RequestBody, ServerFrame,
    };
    use piw_host::store::StoreConfig;
    use serde_json::json;

    use super::*;

    /// A fake host on `paths`' socket: one connection, each `value.get` answered with at
    /// most `piece` bytes of `text` until `answers` replies were sent; then it hangs up.
    /// Returns the offsets asked for.
    fn serve_value(
        paths: &PiwPaths,
        text: String,
        piece: usize,
        answers: usize,
    ) -> std::thread::JoinHandle<Vec<u64>> {
        let listener = UnixListener::bind(&paths.socket).unwrap();
        std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().unwrap();
            let mut asked = Vec::new();
            while asked.len() < answers {
                let Ok(Some(body)) = read_frame(&mut stream, &Limits::default()) else {
                    break;
                };
                let request = Request::decode(&body, &Limits::default()).unwrap();
                let RequestBody::ValueGet(get) = request.body else {
                    panic!("the viewer asked {}", request.body.kind_str());
                };
                asked.push(get.offset);
                let from = usize::try_from(get.offset).unwrap();
                let to = (from + piece).min(text.len());
                let reply = json!({
                    "bytes": text.len(), "offset": get.offset,
                    "data": chunk_to_hex(&text.as_bytes()[from..to]), "more": to < text.len(),
                });
                let frame = ServerFrame::receipt(request.request_id, Receipt::new(None, reply));
                stream
                    .write_all(&encode_frame(&frame, &Limits::default()).unwrap())
                    .unwrap();
            }
            asked
        })
    }

    fn empty_store(paths: &PiwPaths) -> Store {
        std::fs::create_dir_all(&paths.home).unwrap();
        Store::open(&paths.db, StoreConfig::default()).unwrap()
    }

    /// While a host answers, the value comes from it in `value.get` pieces (the store here
    /// does not hold it); a host that hangs up mid-way is an error, not a panic.
    #[test]
    fn a_host_that_answers_sends_the_value_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let paths = PiwPaths::for_home(dir.path().join("home"));
        let store = empty_store(&paths);
        let value = json!({ "text": "y".repeat(3000) });
        let text = value.to_string();
        let reference = ValueRef::for_canonical(&text);
        let source = HostValues {
            paths: paths.clone(),
        };

        let host = serve_value(&paths, text.clone(), 1000, usize::MAX);
        let fetched = source.fetch(&store, "run-1", &reference).unwrap();
        assert_eq!(fetched, value);
        assert_eq!(host.join().unwrap(), [0, 1000, 2000, 3000]);

        std::fs::remove_file(&paths.socket).unwrap();
        let host = serve_value(&paths, text, 1000, 2);
        let error = source.fetch(&store, "run-1", &reference).unwrap_err();
        assert!(error.starts_with("the host: "), "{error}");
        assert_eq!(host.join().unwrap(), [0, 1000]);

        // No host at all: the store answers (and does not hold it).
        std::fs::remove_file(&paths.socket).unwrap();
        let error = source.fetch(&store, "run-1", &reference).unwrap_err();
        assert!(error.contains(&reference.sha256), "{error}");
        assert!(!error.starts_with("the host: "), "{error}");
    }

    #[test]
    fn rows_wrap_at_the_width_and_scroll_back_to_where_they_were() {
        let mut text = ValueText::new(&serde_json::json!({"a": "x".repeat(25), "b": [1, 2]}));
        // `{`, the 35 columns of `  "a": "xxx…",` as 10 + 10 + 10 + 5, `  "b": [`, 1, 2, `]`, `}`.
        assert_eq!(text.visible(10, 3), ["{", r#"  "a": "xx"#, "xxxxxxxxxx"]);
        text.down(3, 10, 3);
        assert_eq!(text.visible(10, 2), ["xxxxxxxxxx", r#"xxx","#]);
        text.down(100, 10, 3);
        assert_eq!(text.visible(10, 5), ["    2", "  ]", "}"]);
        // Up across two lines into the last row of the long one.
        text.up(3, 10);
        assert_eq!(text.visible(10, 1), [r#"xxx","#]);
        text.end(10, 3);
        assert_eq!(text.visible(10, 3), ["    2", "  ]", "}"]);
        text.home();
        assert_eq!(text.visible(10, 1), ["{"]);
    }
}
