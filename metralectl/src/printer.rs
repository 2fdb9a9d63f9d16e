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
        let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
        for row in rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let render = |cells: &mut dyn Iterator<Item = &str>| {
            let padded: Vec<String> = cells
                .zip(&widths)
                .map(|(c, w)| format!("{c:<w$}"))
                .collect();
            padded.join("  ").trim_end().to_owned()
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

fn paint(enabled: bool, style: Style, text: impl Display) -> String {
    if enabled {
        format!("\x1b[{}m{text}\x1b[0m", style.code())
    } else {
        text.to_string()
    }
}
