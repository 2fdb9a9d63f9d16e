//! The chat prompt's line editor: raw mode for one message at a time, with the keys a shell
//! prompt has (←→, Home/End, Backspace/Delete, ↑↓ through the history, Ctrl-U), and several
//! lines a message: Alt-Enter or Ctrl-J starts a new line, as does Enter after a trailing `\`;
//! pasted text keeps its lines. Enter sends. Ctrl-C clears the message (or ends the chat when it
//! is empty), Ctrl-D on an empty message ends it.
//!
//! The editing itself ([`Buffer`]) is plain data, tested without a terminal.

use std::io::{self, Write as _};

use metrale_dashboard::crossterm::cursor::MoveToColumn;
use metrale_dashboard::crossterm::event::{
    self, DisableBracketedPaste, EnableBracketedPaste, Event, KeyCode, KeyEvent, KeyEventKind,
    KeyModifiers,
};
use metrale_dashboard::crossterm::terminal::{self, Clear, ClearType};
use metrale_dashboard::crossterm::{cursor::MoveUp, execute, queue};

/// What the user did at the prompt.
#[derive(Debug, PartialEq, Eq)]
pub enum Read {
    Message(String),
    /// Ctrl-D, or Ctrl-C on an empty prompt.
    End,
}

/// The message being written and the cursor in it (a char index).
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Buffer {
    chars: Vec<char>,
    cursor: usize,
}

/// What a key did to the buffer.
#[derive(Debug, PartialEq, Eq)]
pub enum Step {
    Edited,
    Submit,
    End,
    HistoryUp,
    HistoryDown,
    Ignored,
}

impl Buffer {
    pub fn text(&self) -> String {
        self.chars.iter().collect()
    }

    pub fn set(&mut self, text: &str) {
        self.chars = text.chars().collect();
        self.cursor = self.chars.len();
    }

    pub fn insert(&mut self, text: &str) {
        for c in text.chars().filter(|c| *c != '\r') {
            self.chars.insert(self.cursor, c);
            self.cursor += 1;
        }
    }

    /// Applies one key.
    pub fn key(&mut self, k: KeyEvent) -> Step {
        let ctrl = k.modifiers.contains(KeyModifiers::CONTROL);
        let alt = k.modifiers.contains(KeyModifiers::ALT);
        match k.code {
            KeyCode::Enter if alt => self.insert("\n"),
            KeyCode::Char('j') if ctrl => self.insert("\n"),
            KeyCode::Enter if self.cursor > 0 && self.chars[self.cursor - 1] == '\\' => {
                // A trailing backslash continues the message on a new line.
                self.chars[self.cursor - 1] = '\n';
            }
            KeyCode::Enter => return Step::Submit,
            KeyCode::Char('c') if ctrl => {
                if self.chars.is_empty() {
                    return Step::End;
                }
                *self = Self::default();
            }
            KeyCode::Char('d') if ctrl => {
                if self.chars.is_empty() {
                    return Step::End;
                }
                return Step::Ignored;
            }
            KeyCode::Char('u') if ctrl => {
                self.chars.drain(..self.cursor);
                self.cursor = 0;
            }
            KeyCode::Char('a') if ctrl => self.cursor = 0,
            KeyCode::Char('e') if ctrl => self.cursor = self.chars.len(),
            KeyCode::Char(c) if !ctrl => self.insert(&c.to_string()),
            KeyCode::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.chars.remove(self.cursor);
            }
            KeyCode::Delete if self.cursor < self.chars.len() => {
                self.chars.remove(self.cursor);
            }
            KeyCode::Left => self.cursor = self.cursor.saturating_sub(1),
            KeyCode::Right => self.cursor = (self.cursor + 1).min(self.chars.len()),
            KeyCode::Home => self.cursor = 0,
            KeyCode::End => self.cursor = self.chars.len(),
            KeyCode::Up => return Step::HistoryUp,
            KeyCode::Down => return Step::HistoryDown,
            _ => return Step::Ignored,
        }
        Step::Edited
    }

    /// The screen rows the prompt and message take at `width` columns, and the cursor's
    /// (row, column) among them.
    fn layout(&self, prompt: &str, more: &str, width: usize) -> (usize, (usize, usize)) {
        let width = width.max(1);
        let (mut row, mut col) = (0, prompt.chars().count());
        let mut at = (row, col);
        for (i, c) in self.chars.iter().enumerate() {
            if i == self.cursor {
                at = (row, col);
            }
            if *c == '\n' {
                row += 1;
                col = more.chars().count();
            } else {
                col += 1;
                if col >= width {
                    row += 1;
                    col = 0;
                }
            }
        }
        if self.cursor == self.chars.len() {
            at = (row, col);
        }
        (row + 1, at)
    }
}

/// The prompt: one message at a time, the history walked with ↑↓.
pub struct Editor {
    pub history: Vec<String>,
    prompt: &'static str,
    more: &'static str,
}

impl Editor {
    pub fn new(history: Vec<String>) -> Self {
        Self {
            history,
            prompt: "> ",
            more: ". ",
        }
    }

    /// Reads one message in raw mode; the terminal is restored before it returns.
    pub fn read(&mut self) -> io::Result<Read> {
        terminal::enable_raw_mode()?;
        let _ = execute!(io::stdout(), EnableBracketedPaste);
        let result = self.read_raw();
        let _ = execute!(io::stdout(), DisableBracketedPaste);
        terminal::disable_raw_mode()?;
        println!();
        result
    }

    fn read_raw(&mut self) -> io::Result<Read> {
        let mut buf = Buffer::default();
        // Where in the history ↑↓ are: `history.len()` is the message being written.
        let mut at = self.history.len();
        let mut draft = String::new();
        let mut drawn = (1, 0); // rows drawn, cursor row
        self.draw(&buf, &mut drawn)?;
        loop {
            let step = match event::read()? {
                Event::Key(k) if k.kind != KeyEventKind::Release => buf.key(k),
                Event::Paste(text) => {
                    buf.insert(&text);
                    Step::Edited
                }
                Event::Resize(..) => Step::Edited,
                _ => Step::Ignored,
            };
            match step {
                Step::Submit => return Ok(Read::Message(buf.text())),
                Step::End => return Ok(Read::End),
                Step::HistoryUp if at > 0 => {
                    if at == self.history.len() {
                        draft = buf.text();
                    }
                    at -= 1;
                    buf.set(&self.history[at]);
                }
                Step::HistoryDown if at < self.history.len() => {
                    at += 1;
                    buf.set(self.history.get(at).map_or(draft.as_str(), String::as_str));
                }
                Step::Edited => {}
                _ => continue,
            }
            self.draw(&buf, &mut drawn)?;
        }
    }

    /// Redraws the prompt and message from its first row; `drawn` is (rows, cursor row) of
    /// the last draw.
    fn draw(&self, buf: &Buffer, drawn: &mut (usize, usize)) -> io::Result<()> {
        let width = terminal::size().map_or(80, |(w, _)| usize::from(w));
        let mut out = io::stdout().lock();
        if drawn.1 > 0 {
            queue!(out, MoveUp(u16::try_from(drawn.1).unwrap_or(u16::MAX)))?;
        }
        queue!(out, MoveToColumn(0), Clear(ClearType::FromCursorDown))?;
        let text = buf.text().replace('\n', &format!("\r\n{}", self.more));
        write!(out, "{}{text}", self.prompt)?;
        let (rows, (row, col)) = buf.layout(self.prompt, self.more, width);
        let up = rows - 1 - row;
        if up > 0 {
            queue!(out, MoveUp(u16::try_from(up).unwrap_or(u16::MAX)))?;
        }
        queue!(out, MoveToColumn(u16::try_from(col).unwrap_or(u16::MAX)))?;
        out.flush()?;
        *drawn = (rows, row);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(code: KeyCode) -> KeyEvent {
        KeyEvent::new(code, KeyModifiers::NONE)
    }

    fn typed(buf: &mut Buffer, text: &str) {
        for c in text.chars() {
            buf.key(key(KeyCode::Char(c)));
        }
    }

    #[test]
    fn editing_keys_move_and_delete_by_character() {
        let mut b = Buffer::default();
        typed(&mut b, "héllo");
        b.key(key(KeyCode::Left));
        b.key(key(KeyCode::Left));
        b.key(key(KeyCode::Backspace));
        assert_eq!(b.text(), "hélo");
        b.key(key(KeyCode::Home));
        b.key(key(KeyCode::Delete));
        typed(&mut b, "H");
        assert_eq!(b.text(), "Hélo");
        assert_eq!(b.key(key(KeyCode::Enter)), Step::Submit);
    }

    #[test]
    fn a_trailing_backslash_or_alt_enter_starts_a_new_line() {
        let mut b = Buffer::default();
        typed(&mut b, "one\\");
        assert_eq!(b.key(key(KeyCode::Enter)), Step::Edited);
        typed(&mut b, "two");
        b.key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT));
        typed(&mut b, "three");
        assert_eq!(b.text(), "one\ntwo\nthree");
        assert_eq!(b.key(key(KeyCode::Enter)), Step::Submit);
    }

    #[test]
    fn ctrl_c_clears_then_ends_and_ctrl_d_ends_only_when_empty() {
        let ctrl = |c| KeyEvent::new(KeyCode::Char(c), KeyModifiers::CONTROL);
        let mut b = Buffer::default();
        typed(&mut b, "draft");
        assert_eq!(b.key(ctrl('d')), Step::Ignored);
        assert_eq!(b.key(ctrl('c')), Step::Edited);
        assert_eq!(b.text(), "");
        assert_eq!(b.key(ctrl('c')), Step::End);
        assert_eq!(b.key(ctrl('d')), Step::End);
    }

    #[test]
    fn the_layout_wraps_at_the_width_and_follows_new_lines() {
        let mut b = Buffer::default();
        typed(&mut b, "abcdefgh");
        // "> abcdefgh" at width 6: "> abcd" / "efgh".
        assert_eq!(b.layout("> ", ". ", 6), (2, (1, 4)));
        b.set("ab\ncd");
        assert_eq!(b.layout("> ", ". ", 80), (2, (1, 4)));
        b.key(key(KeyCode::Home));
        assert_eq!(b.layout("> ", ". ", 80), (2, (0, 2)));
    }
}
