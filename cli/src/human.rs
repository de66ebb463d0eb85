//! Text for people: times relative to now ("3 min ago") with their absolute UTC form, and a
//! human decision as its question and choices.

use piw_host::engine::time::UnixMillis;
use serde_json::Value;

/// Now, in Unix milliseconds (the clock runs use is the host's; "ago" is the reader's).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// `then` relative to `now`, as a person reads it: "just now", "42 s ago", "3 min ago",
/// "5 h ago", "2 days ago", and beyond a week the UTC date.
pub(crate) fn ago(then_ms: u64, now_ms: u64) -> String {
    let secs = now_ms.saturating_sub(then_ms) / 1000;
    match secs {
        0..=9 => "just now".into(),
        10..=59 => format!("{secs} s ago"),
        60..=3_599 => format!("{} min ago", secs / 60),
        3_600..=86_399 => format!("{} h ago", secs / 3_600),
        86_400..=172_799 => "1 day ago".into(),
        172_800..=604_799 => format!("{} days ago", secs / 86_400),
        _ => format!("on {}", &utc(then_ms)[..10]),
    }
}

/// A time still to come relative to `now`: "in 42 s", "in 3 min", "in 5 h", "in 2 days",
/// beyond a week "on" the UTC date; "now" once it has come (a due timer fires at the host's
/// next deadline pass).
pub(crate) fn until(then_ms: u64, now_ms: u64) -> String {
    let secs = then_ms.saturating_sub(now_ms).div_ceil(1000);
    match secs {
        0 => "now".into(),
        1..=59 => format!("in {secs} s"),
        // Rounded to the nearest minute or hour: "in 60 min" reads as "in 1 h".
        60..=3_569 => format!("in {} min", (secs + 30) / 60),
        3_570..=86_399 => format!("in {} h", ((secs + 1_800) / 3_600).max(1)),
        86_400..=172_799 => "in 1 day".into(),
        172_800..=604_799 => format!("in {} days", secs / 86_400),
        _ => format!("on {}", &utc(then_ms)[..10]),
    }
}

/// "in 3 min (2026-12-05T03:01:02Z)" for a time to come in a record, `None` when there is none.
pub(crate) fn coming(at: Option<UnixMillis>, now: u64) -> Option<String> {
    at.and_then(|ms| u64::try_from(ms).ok())
        .map(|ms| format!("{} ({})", until(ms, now), utc(ms)))
}

/// A Unix-milliseconds time in RFC 3339, UTC, to the second: `2026-12-05T03:01:02Z`.
pub(crate) fn utc(ms: u64) -> String {
    let secs = ms / 1000;
    let (days, rest) = (secs / 86_400, secs % 86_400);
    let (year, month, day) = civil_from_days(days);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rest / 3_600,
        rest % 3_600 / 60,
        rest % 60
    )
}

/// The proleptic Gregorian date `days` after 1970-01-01 (Howard Hinnant's algorithm).
fn civil_from_days(days: u64) -> (u64, u64, u64) {
    let z = days + 719_468;
    let era = z / 146_097;
    let doe = z % 146_097;
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + u64::from(month <= 2);
    (year, month, day)
}

/// "3 min ago (2026-12-05T03:01:02Z)" for a time in a record, `-` when there is none.
pub(crate) fn when(at: Option<UnixMillis>, now: u64) -> String {
    match at.and_then(|ms| u64::try_from(ms).ok()) {
        Some(ms) => format!("{} ({})", ago(ms, now), utc(ms)),
        None => "-".into(),
    }
}

/// A human decision's request as a person reads it: its question (and details), then each
/// choice with its label, description and the text it takes, indented by `indent`. `None` for
/// a request that names neither a question nor choices (another runtime's): shown raw.
pub(crate) fn decision_lines(request: &Value, indent: &str) -> Option<Vec<String>> {
    let text = |key: &str| {
        request[key]
            .as_str()
            .map(str::trim)
            .filter(|s| !s.is_empty())
    };
    let question = text("question")
        .or_else(|| text("prompt"))
        .or_else(|| text("summary"))
        .or_else(|| text("title"));
    let choices: Vec<&Value> = request["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["id"].is_string())
        .collect();
    if question.is_none() && choices.is_empty() {
        return None;
    }
    let mut lines = Vec::new();
    if let Some(q) = question {
        lines.extend(q.lines().map(|l| format!("{indent}{l}")));
    }
    if let Some(details) = text("details") {
        lines.extend(details.lines().map(|l| format!("{indent}{l}")));
    }
    if !choices.is_empty() {
        lines.push(format!("{indent}choices:"));
    }
    for c in choices {
        let id = c["id"].as_str().unwrap_or_default();
        let mut line = format!("{indent}  {id}");
        if let Some(label) = c["label"].as_str().filter(|l| *l != id) {
            line.push_str(&format!(" ({label})"));
        }
        if let Some(d) = c["description"].as_str().filter(|d| !d.is_empty()) {
            line.push_str(&format!(": {d}"));
        }
        if let Some(input) = c.get("input").or_else(|| c.get("textInput")) {
            line.push_str(&text_rule(input));
        }
        lines.push(line);
    }
    Some(lines)
}

/// What text a choice takes: " + text NAME (5 to 200 characters)".
fn text_rule(input: &Value) -> String {
    if !input.is_object() {
        return String::new();
    }
    let name = ["label", "prompt", "name"]
        .iter()
        .find_map(|k| input[*k].as_str().filter(|s| !s.trim().is_empty()))
        .unwrap_or("text");
    let bounds = match (input["minLength"].as_u64(), input["maxLength"].as_u64()) {
        (Some(min), Some(max)) => format!(" ({min} to {max} characters)"),
        (Some(min), None) => format!(" (at least {min} characters)"),
        (None, Some(max)) => format!(" (at most {max} characters)"),
        (None, None) => String::new(),
    };
    format!(" + text \"{name}\"{bounds}")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_to_come_read_as_in_with_their_utc_form() {
        let now = 1_700_000_000_000;
        assert_eq!(until(now, now), "now");
        assert_eq!(until(now - 5_000, now), "now");
        assert_eq!(until(now + 1, now), "in 1 s");
        assert_eq!(until(now + 90_000, now), "in 2 min");
        assert_eq!(until(now + 3_598_000, now), "in 1 h");
        assert_eq!(until(now + 3 * 3_600_000, now), "in 3 h");
        assert_eq!(until(now + 86_400_000, now), "in 1 day");
        assert_eq!(until(now + 3 * 86_400_000, now), "in 3 days");
        assert_eq!(until(now + 30 * 86_400_000, now), "on 2023-12-14");
        assert_eq!(
            coming(Some(now as i64 + 60_000), now).as_deref(),
            Some("in 1 min (2023-11-14T22:14:20Z)")
        );
        assert_eq!(coming(None, now), None);
    }

    #[test]
    fn times_read_as_ago_with_their_utc_form() {
        let now = 1_764_903_662_000; // 2025-12-05T03:01:02Z
        assert_eq!(utc(now), "2025-12-05T03:01:02Z");
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400_000), "2000-02-29T00:00:00Z");
        assert_eq!(ago(now - 3_000, now), "just now");
        assert_eq!(
            ago(now + 5_000, now),
            "just now",
            "a clock ahead is not the future"
        );
        assert_eq!(ago(now - 42_000, now), "42 s ago");
        assert_eq!(ago(now - 3 * 60_000 - 59_000, now), "3 min ago");
        assert_eq!(ago(now - 5 * 3_600_000, now), "5 h ago");
        assert_eq!(ago(now - 30 * 3_600_000, now), "1 day ago");
        assert_eq!(ago(now - 3 * 86_400_000, now), "3 days ago");
        assert_eq!(ago(now - 30 * 86_400_000, now), "on 2025-11-05");
        assert_eq!(when(None, now), "-");
        assert_eq!(
            when(Some(now as i64 - 42_000), now),
            "42 s ago (2025-12-05T03:00:20Z)"
        );
    }

    #[test]
    fn a_decision_reads_as_its_question_and_choices() {
        let request = json!({"question": "Ship it?", "details": "tests pass",
            "choices": [{"id": "approve", "label": "Approve", "description": "merge now"},
                        {"id": "reject", "input": {"name": "why", "minLength": 5}},
                        {"no": "id"}]});
        assert_eq!(
            decision_lines(&request, "  ").unwrap(),
            [
                "  Ship it?",
                "  tests pass",
                "  choices:",
                "    approve (Approve): merge now",
                "    reject + text \"why\" (at least 5 characters)",
            ]
        );
        assert_eq!(decision_lines(&json!({"x": 1}), ""), None);
    }
}
