//! The table every view draws its rows with: columns with priorities (the low ones go first on
//! narrow terminals), sort keys with a natural order for names, a cursor that scrolls, and a note
//! for an empty table.

use crate::app::App;
use crate::theme::Theme;
use crate::widgets::text::{truncate, truncate_mid};
use ratatui::Frame;
use ratatui::layout::{Alignment, Constraint, Rect};
use ratatui::style::Modifier;
use ratatui::text::{Line, Span};
use ratatui::widgets::{Cell, HighlightSpacing, Paragraph, Row, Table, TableState};
use std::cmp::Ordering;
use unicode_width::UnicodeWidthStr;

/// A sort key of one cell: a number, a borrowed field, or text made for the purpose.
#[derive(Clone, Debug)]
pub(crate) enum Key<'a> {
    Num(f64),
    Str(&'a str),
    Text(String),
}

fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut ai, mut bi) = (a.chars().peekable(), b.chars().peekable());
    loop {
        match (ai.peek().copied(), bi.peek().copied()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some(x), Some(y)) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let mut na = String::new();
                while let Some(c) = ai.peek().copied().filter(char::is_ascii_digit) {
                    na.push(c);
                    ai.next();
                }
                let mut nb = String::new();
                while let Some(c) = bi.peek().copied().filter(char::is_ascii_digit) {
                    nb.push(c);
                    bi.next();
                }
                let o = na
                    .trim_start_matches('0')
                    .len()
                    .cmp(&nb.trim_start_matches('0').len())
                    .then_with(|| na.trim_start_matches('0').cmp(nb.trim_start_matches('0')));
                if o != Ordering::Equal {
                    return o;
                }
            }
            (Some(x), Some(y)) => {
                let o = x.to_ascii_lowercase().cmp(&y.to_ascii_lowercase());
                if o != Ordering::Equal {
                    return o;
                }
                ai.next();
                bi.next();
            }
        }
    }
}

impl Key<'_> {
    fn text(&self) -> Option<&str> {
        match self {
            Key::Num(_) => None,
            Key::Str(s) => Some(s),
            Key::Text(s) => Some(s),
        }
    }

    fn cmp(&self, other: &Key) -> Ordering {
        match (self, other) {
            (Key::Num(a), Key::Num(b)) => a.partial_cmp(b).unwrap_or(Ordering::Equal),
            (Key::Num(_), _) => Ordering::Less,
            (_, Key::Num(_)) => Ordering::Greater,
            _ => natural_cmp(self.text().unwrap_or(""), other.text().unwrap_or("")),
        }
    }
}

/// Rendering context shared by the column functions.
pub(crate) struct Ctx<'a> {
    pub th: &'a Theme,
    pub app: &'a App,
    /// Mean of the table's main figure (for "× mean" cells); 0 when unused.
    pub mean: f64,
    /// Mean of the ingress figure (for "▼ × mean" cells); 0 when unused.
    pub mean_in: f64,
    /// Max of the table's main figure (for bars); 0 when unused.
    pub max: f64,
}

/// One column of a table.
pub(crate) struct Col<R> {
    pub title: String,
    /// Lower shows first when the terminal is narrow; 0 is never dropped.
    pub prio: u8,
    pub right: bool,
    pub max: u16,
    /// Cut too-long cells in the middle ("ep@0x7f…39f058"): for ids whose ends tell them apart.
    pub mid: bool,
    pub cell: fn(&R, &Ctx) -> Span<'static>,
    pub key: fn(&R) -> Key<'_>,
}

impl<R> Col<R> {
    /// A column whose cells are left-aligned (names, lists).
    pub fn left(
        title: impl Into<String>,
        prio: u8,
        max: u16,
        cell: fn(&R, &Ctx) -> Span<'static>,
        key: fn(&R) -> Key<'_>,
    ) -> Col<R> {
        Col {
            title: title.into(),
            prio,
            right: false,
            max,
            mid: false,
            cell,
            key,
        }
    }

    /// A column whose cells are right-aligned (figures).
    pub fn right(
        title: impl Into<String>,
        prio: u8,
        max: u16,
        cell: fn(&R, &Ctx) -> Span<'static>,
        key: fn(&R) -> Key<'_>,
    ) -> Col<R> {
        Col {
            right: true,
            ..Col::left(title, prio, max, cell, key)
        }
    }

    /// Too-long cells are cut in the middle (see `mid`).
    pub fn mid(self) -> Col<R> {
        Col { mid: true, ..self }
    }
}

/// Sorts rows by a column (stable; ties keep the source order).
pub(crate) fn sort_rows<R>(rows: &mut [&R], cols: &[Col<R>], column: usize, descending: bool) {
    sort_rows_front(rows, cols, column, descending, usize::MAX);
}

/// Like [`sort_rows`], but only the first `front` rows need to end up in order (the rows a table
/// can show: its cursor plus a page): those are exactly what a full stable sort puts there, the
/// rest are left in no particular order. With thousands of rows and a page of fifty, this is a
/// linear selection plus a small sort instead of a full sort every frame.
pub(crate) fn sort_rows_front<R>(
    rows: &mut [&R],
    cols: &[Col<R>],
    column: usize,
    descending: bool,
    front: usize,
) {
    if cols.is_empty() || rows.len() < 2 {
        return;
    }
    let c = &cols[column % cols.len()];
    // Compute each key once; the source position breaks ties, so the order is total and an
    // unstable selection gives what the stable sort gives.
    let mut keyed: Vec<(Key, usize, &R)> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| ((c.key)(r), i, *r))
        .collect();
    let order = |a: &(Key, usize, &R), b: &(Key, usize, &R)| {
        let o = a.0.cmp(&b.0);
        let o = if descending { o.reverse() } else { o };
        o.then(a.1.cmp(&b.1))
    };
    if front < keyed.len() {
        let n = front.max(1);
        keyed.select_nth_unstable_by(n - 1, order);
        keyed[..n].sort_unstable_by(order);
    } else {
        keyed.sort_unstable_by(order);
    }
    for (slot, (_, _, r)) in rows.iter_mut().zip(keyed) {
        *slot = r;
    }
}

/// The sorted column's mark: arrows, not the triangles that mean sent (▲) and received (▼).
pub(crate) fn sort_mark(descending: bool) -> &'static str {
    if descending { "↓" } else { "↑" }
}

/// Draws rows as a table into `area` (header + rows), dropping low-priority columns that do not fit.
/// `selected` is an index into `rows`; when `track` the app learns the row count and page height.
#[allow(clippy::too_many_arguments)]
pub(crate) fn render_table<R>(
    frame: &mut Frame,
    area: Rect,
    ctx: &Ctx,
    cols: &[Col<R>],
    rows: &[&R],
    sort_col: Option<(usize, bool)>,
    selected: Option<usize>,
    track: bool,
) {
    let th = ctx.th;
    let visible = area.height.saturating_sub(1) as usize;
    if track {
        ctx.app.seen(rows.len(), visible);
    }
    let sel = selected.map(|s| s.min(rows.len().saturating_sub(1)));
    let offset = sel
        .map(|s| s.saturating_sub(visible.saturating_sub(1)))
        .unwrap_or(0);
    let slice = &rows[offset.min(rows.len())..(offset + visible).min(rows.len())];
    let sorted = sort_col.map(|(c, d)| (c % cols.len().max(1), d));
    let titles: Vec<String> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| match sorted {
            Some((s, d)) if s == i => format!("{}{}", c.title, sort_mark(d)),
            _ => c.title.clone(),
        })
        .collect();
    let cells: Vec<Vec<Span<'static>>> = slice
        .iter()
        .map(|r| cols.iter().map(|c| (c.cell)(r, ctx)).collect())
        .collect();
    // What each column would need uncut, and what it gets at first (its cap). The sort mark is
    // left out here (one column is kept for it below): which columns fit never depends on which
    // one is sorted, so sorting by a column never moves it off screen.
    let natural: Vec<u16> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let data = cells.iter().map(|row| row[i].width()).max().unwrap_or(0);
            data.max(c.title.width()).min(u16::MAX as usize) as u16
        })
        .collect();
    let mut widths: Vec<u16> = cols
        .iter()
        .enumerate()
        .map(|(i, c)| natural[i].min(c.max.max(c.title.width() as u16)))
        .collect();
    // Pick columns by priority until the width is used up; the selection marker takes 2. Among
    // columns a person needs as much, the narrow ones are kept first: the widest goes first.
    let mut order: Vec<usize> = (0..cols.len()).collect();
    // The sorted column is as needed as the first ones: sorting by a column (`s` goes to the
    // next one on screen) never takes it off screen, whatever the rows it brings up.
    let prio = |i: usize| match sorted {
        Some((s, _)) if s == i => 0,
        _ => cols[i].prio,
    };
    order.sort_by_key(|&i| (prio(i), widths[i], i));
    let mut budget = area.width.saturating_sub(2 + u16::from(sorted.is_some())) as i32;
    let mut keep = vec![false; cols.len()];
    for i in order {
        let need = widths[i] as i32 + 1;
        if need <= budget + 1 {
            keep[i] = true;
            budget -= need;
        } else if prio(i) == 0 {
            keep[i] = true; // never dropped; it will be cut
            budget -= need;
        }
    }
    // The sorted column's mark, in the column kept for it.
    if let Some((s, _)) = sorted
        && keep[s]
    {
        let w = titles[s].width() as u16;
        if w > widths[s] {
            widths[s] = w;
        } else {
            budget += 1;
        }
    } else if sorted.is_some() {
        budget += 1;
    }
    // Width left over on a wide terminal goes to the columns that were cut (endpoint names,
    // peers), most important first, so nothing is cut while there is room.
    let mut by_prio: Vec<usize> = (0..cols.len()).filter(|&i| keep[i]).collect();
    by_prio.sort_by_key(|&i| (cols[i].prio, i));
    for i in by_prio {
        if budget <= 0 {
            break;
        }
        let more = (natural[i].saturating_sub(widths[i]) as i32).min(budget);
        widths[i] += more as u16;
        budget -= more;
    }
    let shown: Vec<usize> = (0..cols.len()).filter(|&i| keep[i]).collect();
    if track {
        ctx.app.seen_columns(&shown);
    }
    let align = |i: usize| {
        if cols[i].right {
            Alignment::Right
        } else {
            Alignment::Left
        }
    };
    let header = Row::new(shown.iter().map(|&i| {
        let style = match sorted {
            Some((s, _)) if s == i => th.table_header.add_modifier(Modifier::UNDERLINED),
            _ => th.table_header,
        };
        Cell::from(Line::from(Span::styled(titles[i].clone(), style)).alignment(align(i)))
    }));
    let body: Vec<Row> = cells
        .into_iter()
        .map(|mut row| {
            Row::new(shown.iter().map(|&i| {
                let mut span = std::mem::take(&mut row[i]);
                let w = widths[i] as usize;
                if span.width() > w {
                    span.content = if cols[i].mid {
                        truncate_mid(&span.content, w)
                    } else {
                        truncate(&span.content, w)
                    }
                    .into();
                }
                Cell::from(Line::from(span).alignment(align(i)))
            }))
        })
        .collect();
    let constraints: Vec<Constraint> = shown
        .iter()
        .map(|&i| Constraint::Length(widths[i]))
        .collect();
    let table = Table::new(body, constraints)
        .header(header)
        .column_spacing(1)
        .row_highlight_style(th.selected)
        .highlight_symbol("▸ ")
        .highlight_spacing(HighlightSpacing::Always);
    let mut state = TableState::default().with_selected(sel.map(|s| s - offset));
    frame.render_stateful_widget(table, area, &mut state);
    if rows.is_empty() && area.height > 1 {
        let msg = if ctx.app.filter.is_empty() {
            match &ctx.app.empty_hint {
                Some(h) => format!("  (none: {h})"),
                None => "  (none yet)".to_string(),
            }
        } else if let Some(m) = ctx.app.parsed_filter().unknown_keys_message() {
            format!("  (nothing matches: {m}; Esc clears the filter)")
        } else {
            "  (nothing matches the filter; Esc clears it)".to_string()
        };
        let r = Rect {
            y: area.y + 1,
            height: 1,
            ..area
        };
        frame.render_widget(Paragraph::new(Span::styled(msg, th.dim)), r);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order() {
        let mut v = vec!["node10", "node2", "node1", "Node3"];
        v.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(v, vec!["node1", "node2", "Node3", "node10"]);
    }

    #[test]
    fn sorting_the_front_gives_the_front_of_a_full_stable_sort() {
        let cols: Vec<Col<(u32, &str)>> = vec![
            Col {
                title: "n".into(),
                prio: 0,
                right: true,
                max: 4,
                mid: false,
                cell: |r, _| Span::raw(r.0.to_string()),
                key: |r| Key::Num(f64::from(r.0 % 7)),
            },
            Col {
                title: "s".into(),
                prio: 0,
                right: false,
                max: 4,
                mid: false,
                cell: |r, _| Span::raw(r.1.to_string()),
                key: |r| Key::Str(r.1),
            },
        ];
        let names = ["b", "a10", "a2", "c", "a1"];
        let data: Vec<(u32, &str)> = (0..200u32)
            .map(|i| (i * 31 % 97, names[i as usize % names.len()]))
            .collect();
        for column in 0..2 {
            for desc in [false, true] {
                let mut full: Vec<&(u32, &str)> = data.iter().collect();
                full.sort_by(|a, b| {
                    let o = (cols[column].key)(a).cmp(&(cols[column].key)(b));
                    if desc { o.reverse() } else { o }
                });
                for front in [0, 1, 7, 50, 199, 200, 500] {
                    let mut rows: Vec<&(u32, &str)> = data.iter().collect();
                    sort_rows_front(&mut rows, &cols, column, desc, front);
                    let n = front.min(rows.len());
                    assert_eq!(
                        rows[..n],
                        full[..n],
                        "column {column} desc {desc} front {front}"
                    );
                    let mut all = rows.clone();
                    all.sort();
                    let mut want = full.clone();
                    want.sort();
                    assert_eq!(all, want, "same rows");
                }
            }
        }
    }
}
