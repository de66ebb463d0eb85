//! Plain-text tables (`piw runs`): each column as wide as its widest cell, so nothing collides
//! whatever a workflow or node is called; on a terminal narrower than that, the columns that
//! may be cut give up width, the others (run ids among them) never.
//!
//! A width computation of our own rather than a table crate: one table of single-line cells
//! needs the widest cell per column and a cut with `…`, which `unicode-width` (already in the
//! tree) measures; a crate would add its own terminal handling beside crossterm's.

use unicode_width::{UnicodeWidthChar as _, UnicodeWidthStr as _};

/// The space between two columns.
const GAP: &str = "  ";

/// The narrowest a column that may be cut becomes: enough to recognise a name by.
const NARROWEST: usize = 8;

/// `rows` under `headers`, left-aligned, one line each, the last column not padded. With
/// `fit` (the terminal's width), the columns in `cut_first` (earliest listed gives up width
/// first) are narrowed, down to [`NARROWEST`] or their header, until the table fits, and their
/// longer cells end with `…`; other columns are never cut (a line wider than `fit` remains
/// when they alone do not fit).
pub(crate) fn render(
    headers: &[&str],
    rows: &[Vec<String>],
    cut_first: &[usize],
    fit: Option<usize>,
) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.width()).collect();
    for row in rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.width());
        }
    }
    if let Some(fit) = fit {
        let total = widths.iter().sum::<usize>() + GAP.len() * widths.len().saturating_sub(1);
        let mut excess = total.saturating_sub(fit);
        for &column in cut_first {
            let floor = NARROWEST.max(headers[column].width());
            let give = excess.min(widths[column].saturating_sub(floor));
            widths[column] -= give;
            excess -= give;
        }
    }
    let mut out = String::new();
    let lines = std::iter::once(headers.iter().map(|h| (*h).to_owned()).collect::<Vec<_>>())
        .chain(rows.iter().cloned());
    for (n, row) in lines.enumerate() {
        if n > 0 {
            out.push('\n');
        }
        let mut line = String::new();
        for (i, (cell, &width)) in row.iter().zip(&widths).enumerate() {
            if i > 0 {
                line.push_str(GAP);
            }
            let cell = cut(cell, width);
            line.push_str(&cell);
            if i + 1 < row.len() {
                line.push_str(&" ".repeat(width.saturating_sub(cell.width())));
            }
        }
        out.push_str(line.trim_end());
    }
    out
}

/// `text` within `width` columns: whole when it fits, else its start and `…`.
fn cut(text: &str, width: usize) -> String {
    if text.width() <= width {
        return text.to_owned();
    }
    let mut kept = String::new();
    let mut used = 0;
    for c in text.chars() {
        let w = c.width().unwrap_or(0);
        if used + w + 1 > width {
            break;
        }
        kept.push(c);
        used += w;
    }
    kept.push('…');
    kept
}

/// The terminal's width when standard output is a terminal; `None` for a pipe or a file (a
/// script reads whole lines).
pub(crate) fn terminal_width() -> Option<usize> {
    if !std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return None;
    }
    ratatui::crossterm::terminal::size()
        .ok()
        .map(|(columns, _)| usize::from(columns))
        .filter(|&w| w > 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(list: &[&[&str]]) -> Vec<Vec<String>> {
        list.iter()
            .map(|r| r.iter().map(|c| (*c).to_owned()).collect())
            .collect()
    }

    #[test]
    fn columns_are_as_wide_as_their_widest_cell() {
        let table = render(
            &["RUN", "WORKFLOW", "NODE"],
            &rows(&[
                &["3bf1bb", "a-rather-long-workflow-name", "draft"],
                &["c4230d", "w", "-"],
            ]),
            &[1],
            None,
        );
        assert_eq!(
            table,
            "RUN     WORKFLOW                     NODE\n\
             3bf1bb  a-rather-long-workflow-name  draft\n\
             c4230d  w                            -"
        );
    }

    #[test]
    fn on_a_narrow_terminal_the_cuttable_columns_give_way_and_ids_never_do() {
        let data = rows(&[&[
            "run-01a251f8cfebf1bb6b58c4230d21",
            "a-rather-long-workflow-name",
            "a-node-with-a-long-name · wakes in 2 h",
        ]]);
        let table = render(&["RUN", "WORKFLOW", "NODE"], &data, &[2, 1], Some(60));
        let lines: Vec<&str> = table.lines().collect();
        assert!(lines.iter().all(|l| l.width() <= 60), "{table}");
        assert!(
            lines[1].starts_with("run-01a251f8cfebf1bb6b58c4230d21  "),
            "{table}"
        );
        assert!(lines[1].contains('…'), "{table}");
        // Too narrow for the id itself: the id stays whole, the others shrink to their floor.
        let table = render(&["RUN", "WORKFLOW", "NODE"], &data, &[2, 1], Some(20));
        assert!(
            table.contains("run-01a251f8cfebf1bb6b58c4230d21"),
            "{table}"
        );
        assert!(table.contains("a-rathe…"), "{table}");
    }
}
