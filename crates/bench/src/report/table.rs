//! Text tables for the console: columns aligned under optional group
//! headings, and the widest line a console table may take. The console
//! summary, GuideLLM's console tables and the comparison all draw with
//! these.

/// How a column's cells line up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Align {
    Left,
    Right,
}

/// A column: a group heading shared with its neighbours (may be empty), a
/// title, and an alignment.
#[derive(Clone, Copy)]
pub(crate) struct Column {
    group: &'static str,
    title: &'static str,
    align: Align,
}

impl Column {
    /// A column under `group` (empty for none).
    pub(crate) const fn new(group: &'static str, title: &'static str, align: Align) -> Self {
        Column {
            group,
            title,
            align,
        }
    }
}

/// A text table with aligned columns and an optional group heading row.
pub(crate) struct Table {
    pub(crate) columns: Vec<Column>,
    pub(crate) rows: Vec<Vec<String>>,
}

/// The space between two columns.
pub(crate) const GAP: &str = "  ";

/// The width of `s` on the console, in characters.
pub(crate) fn width(s: &str) -> usize {
    s.chars().count()
}

/// `s` filled with spaces to `width_`, on the side `align` says.
fn pad(s: &str, width_: usize, align: Align) -> String {
    let fill = " ".repeat(width_.saturating_sub(width(s)));
    match align {
        Align::Left => format!("{s}{fill}"),
        Align::Right => format!("{fill}{s}"),
    }
}

impl Table {
    /// The table as text, columns aligned, with a rule under the titles.
    pub(crate) fn render(&self) -> String {
        let mut widths: Vec<usize> = self.columns.iter().map(|c| width(c.title)).collect();
        for row in &self.rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(width(cell));
            }
        }
        // Group spans: (group, first column, last column).
        let mut spans: Vec<(&str, usize, usize)> = Vec::new();
        for (i, c) in self.columns.iter().enumerate() {
            match spans.last_mut() {
                Some((g, _, last)) if !c.group.is_empty() && *g == c.group => *last = i,
                _ => spans.push((c.group, i, i)),
            }
        }
        // Widen a span's last column when its heading is wider than the span.
        for &(group, first, last) in &spans {
            let span: usize =
                widths[first..=last].iter().sum::<usize>() + GAP.len() * (last - first);
            if width(group) > span {
                widths[last] += width(group) - span;
            }
        }
        let mut out = String::new();
        if spans.iter().any(|(g, _, _)| !g.is_empty()) {
            let cells: Vec<String> = spans
                .iter()
                .map(|&(group, first, last)| {
                    let span =
                        widths[first..=last].iter().sum::<usize>() + GAP.len() * (last - first);
                    pad(group, span, Align::Left)
                })
                .collect();
            out.push_str(cells.join(GAP).trim_end());
            out.push('\n');
        }
        let line = |cells: Vec<String>| cells.join(GAP).trim_end().to_owned();
        out.push_str(&line(
            self.columns
                .iter()
                .zip(&widths)
                .map(|(c, &w)| pad(c.title, w, c.align))
                .collect(),
        ));
        out.push('\n');
        let rule: usize = widths.iter().sum::<usize>() + GAP.len() * widths.len().saturating_sub(1);
        out.push_str(&"-".repeat(rule));
        out.push('\n');
        for row in &self.rows {
            out.push_str(&line(
                self.columns
                    .iter()
                    .zip(&widths)
                    .zip(row)
                    .map(|((c, &w), cell)| pad(cell, w, c.align))
                    .collect(),
            ));
            out.push('\n');
        }
        out
    }
}

/// The widest line a console table may take: wider tables are split in
/// two rather than wrap.
pub const CONSOLE_WIDTH: usize = 120;
