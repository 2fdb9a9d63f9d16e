//! The one way commands write to the terminal.
//!
//! Results go to stdout (as text, or as JSON with `--json`); notes, warnings and errors go to
//! stderr, and `--quiet` drops notes and warnings. Colour only when the stream is a terminal and
//! `NO_COLOR` is unset or empty, never in JSON.

use std::env;
use std::fmt::Display;
use std::io::{self, IsTerminal, Write};

use serde::Serialize;

#[derive(Debug, Clone, Copy)]
pub enum Style {
    Bold,
    Dim,
    Green,
    Yellow,
    Red,
}

impl Style {
    fn code(self) -> &'static str {
        match self {
            Self::Bold => "1",
            Self::Dim => "2",
            Self::Green => "32",
            Self::Yellow => "33",
            Self::Red => "31",
        }
    }
}

#[derive(Debug)]
pub struct Printer {
    quiet: bool,
    json: bool,
    color_out: bool,
    color_err: bool,
}

impl Printer {
    pub fn new(quiet: bool, json: bool) -> Self {
        let no_color = env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
        Self {
            quiet,
            json,
            color_out: !json && !no_color && io::stdout().is_terminal(),
            color_err: !no_color && io::stderr().is_terminal(),
        }
    }

    pub fn json_mode(&self) -> bool {
        self.json
    }

    /// Whether live progress bars may be drawn on stderr: a terminal, and not `--quiet`.
    pub fn live_progress(&self) -> bool {
        !self.quiet && io::stderr().is_terminal()
    }

    /// `text` styled for stdout.
    pub fn paint(&self, style: Style, text: impl Display) -> String {
        paint(self.color_out, style, text)
    }

    /// One line of the result.
    pub fn line(&self, text: impl Display) -> io::Result<()> {
        writeln!(io::stdout().lock(), "{text}")
    }

    /// Raw bytes of the result, as they are.
    pub fn raw(&self, bytes: &[u8]) -> io::Result<()> {
        let mut out = io::stdout().lock();
        out.write_all(bytes)?;
        out.flush()
    }

    /// The result as pretty JSON.
    pub fn json(&self, value: &impl Serialize) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(value)?;
        writeln!(io::stdout().lock(), "{text}")?;
        Ok(())
    }

    /// A table: a header row, then rows, columns padded to their widest cell.
    pub fn table(&self, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
        self.table_fit(header, rows, &[])
    }

    /// The terminal's width: `COLUMNS`, else stdout's terminal; `None` for a pipe.
    pub fn width(&self) -> Option<usize> {
        env::var("COLUMNS")
            .ok()
            .and_then(|c| c.parse::<usize>().ok())
            .filter(|c| *c > 0)
            .or_else(|| {
                terminal_size::terminal_size_of(io::stdout())
                    .map(|(terminal_size::Width(w), _)| usize::from(w))
            })
    }

    /// [`Self::table`], narrowed to the terminal's width: the `shrink` columns (indices) give up
    /// characters, the widest first, their cells cut with `…`; the others stay whole.
    pub fn table_fit(
        &self,
        header: &[&str],
        rows: &[Vec<String>],
        shrink: &[usize],
    ) -> io::Result<()> {
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        if let Some(limit) = self.width() {
            let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            if total > limit {
                // The first column gives up its longest cells first (they get a line of their
                // own), then the shrinkable ones narrow.
                widths[0] = widths[0].min(FIRST_COLUMN.max(header[0].chars().count()));
            }
            fit_widths(&mut widths, header, shrink, limit);
            // Still too wide: the first column narrows too, and a first cell longer than it
            // gets a line of its own (it is never cut: names are typed back).
            let total = widths.iter().sum::<usize>() + 2 * widths.len().saturating_sub(1);
            if total > limit {
                widths[0] = widths[0]
                    .saturating_sub(total - limit)
                    .max(header[0].chars().count().max(12));
            }
        }
        let first = widths.first().copied().unwrap_or(0);
        let render = |cells: &mut dyn Iterator<Item = &str>| {
            let mut lines = Vec::new();
            let padded: Vec<String> = cells
                .zip(&widths)
                .enumerate()
                .map(|(i, (c, w))| {
                    if i == 0 && c.chars().count() > first {
                        lines.push(c.to_owned());
                        " ".repeat(first)
                    } else {
                        format!("{:<w$}", cut(c, *w))
                    }
                })
                .collect();
            lines.push(padded.join("  ").trim_end().to_owned());
            lines.join("\n")
        };
        let mut out = io::stdout().lock();
        writeln!(
            out,
            "{}",
            self.paint(Style::Bold, render(&mut header.iter().copied()))
        )?;
        for row in rows {
            writeln!(out, "{}", render(&mut row.iter().map(String::as_str)))?;
        }
        Ok(())
    }

    /// A note on stderr, unless quiet.
    pub fn note(&self, text: impl Display) {
        self.to_stderr("note", Style::Dim, text);
    }

    /// A warning on stderr, unless quiet.
    pub fn warn(&self, text: impl Display) {
        self.to_stderr("warning", Style::Yellow, text);
    }

    fn to_stderr(&self, label: &str, style: Style, text: impl Display) {
        if !self.quiet {
            // Nothing useful can be done if stderr is gone.
            let _ = writeln!(
                io::stderr().lock(),
                "{}: {text}",
                paint(self.color_err, style, label)
            );
        }
    }

    /// An error and its hint, always printed.
    pub fn error(&self, err: &anyhow::Error, hint: Option<&str>) {
        let mut e = io::stderr().lock();
        let _ = writeln!(e, "{}: {err:#}", paint(self.color_err, Style::Red, "error"));
        if let Some(hint) = hint {
            let _ = writeln!(e, "{}: {hint}", paint(self.color_err, Style::Bold, "hint"));
        }
    }
}

/// The first column's width when a table is too wide for the terminal.
const FIRST_COLUMN: usize = 32;

/// Narrows the `shrink` columns, the widest first, until the row fits `limit` (two spaces between
/// columns) or each is down to its header's width.
fn fit_widths(widths: &mut [usize], header: &[&str], shrink: &[usize], limit: usize) {
    let total = |w: &[usize]| w.iter().sum::<usize>() + 2 * w.len().saturating_sub(1);
    while total(widths) > limit {
        let widest = shrink
            .iter()
            .copied()
            .filter(|&i| widths[i] > header[i].chars().count().max(6))
            .max_by_key(|&i| widths[i]);
        match widest {
            Some(i) => widths[i] -= 1,
            None => return,
        }
    }
}

/// `text` in at most `width` characters, its end replaced by `…` when cut.
fn cut(text: &str, width: usize) -> std::borrow::Cow<'_, str> {
    if text.chars().count() <= width {
        return text.into();
    }
    let kept: String = text.chars().take(width.saturating_sub(1)).collect();
    format!("{kept}…").into()
}

fn paint(enabled: bool, style: Style, text: impl Display) -> String {
    if enabled {
        format!("\x1b[{}m{text}\x1b[0m", style.code())
    } else {
        text.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_widest_shrinkable_column_gives_way_first() {
        let mut widths = vec![10, 30, 20];
        fit_widths(&mut widths, &["NAME", "CHECKPOINT", "QUANT"], &[1, 2], 50);
        assert_eq!(widths, vec![10, 18, 18]);
        // Never below the header (or 6): the table stays wider than asked.
        let mut widths = vec![10, 30, 20];
        fit_widths(&mut widths, &["NAME", "CHECKPOINT", "QUANT"], &[1, 2], 10);
        assert_eq!(widths, vec![10, 10, 6]);
        assert_eq!(cut("nvidia/Qwen3.6-27B-NVFP4", 10), "nvidia/Qw…");
        assert_eq!(cut("bf16", 10), "bf16");
    }
}
