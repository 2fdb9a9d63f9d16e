//! The terminal: raw mode and the alternate screen on the way in, restored on the way out,
//! on an error and on a panic (ratatui's `try_init` installs the panic hook); the key reader;
//! and the one event loop that owns the [`App`].

use std::io;
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use ratatui::Terminal;
use ratatui::backend::Backend;
use ratatui::crossterm::event::{self, Event as TermEvent, KeyCode, KeyEventKind, KeyModifiers};

use crate::app::{App, Input, Key};
use crate::draw::draw;

/// The shortest time between two frames (at most 20 frames a second).
pub const FRAME: Duration = Duration::from_millis(50);
/// A tick this often keeps the screen current when nothing arrives.
const TICK: Duration = Duration::from_millis(500);

/// Restores the terminal when dropped (an early return, an error).
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// How the dashboard ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ended {
    /// `q` or Ctrl-C (or every source gone).
    Quit,
    /// `d` in a server's dashboard: the server keeps running.
    Detach,
}

/// Take over the terminal and show the dashboard until `q` or Ctrl-C. Sources send their
/// [`Input`]s on clones of `tx`; keys and ticks are added here.
pub fn run(target: String, tx: Sender<Input>, rx: Receiver<Input>) -> io::Result<Ended> {
    run_app(App::new(target), tx, rx)
}

/// [`run`] with a given app (`App::for_server` for `met serve`'s own dashboard).
pub fn run_app(mut app: App, tx: Sender<Input>, rx: Receiver<Input>) -> io::Result<Ended> {
    let mut terminal = ratatui::try_init()?;
    let _restore = Restore;
    std::thread::Builder::new()
        .name("dashboard-keys".into())
        .spawn(move || read_keys(&tx))?;
    run_loop(&mut terminal, &mut app, &rx)?;
    Ok(if app.detach {
        Ended::Detach
    } else {
        Ended::Quit
    })
}

/// The event loop: apply every input that arrived, then draw at most once a [`FRAME`].
/// Returns when the app quits or every sender is gone.
pub fn run_loop<B: Backend>(
    terminal: &mut Terminal<B>,
    app: &mut App,
    rx: &Receiver<Input>,
) -> io::Result<()>
where
    B::Error: Into<io::Error>,
{
    let mut last_draw: Option<Instant> = None;
    let mut dirty = true;
    loop {
        let wait = last_draw.map_or(Duration::ZERO, |t| FRAME.saturating_sub(t.elapsed()));
        match rx.recv_timeout(if dirty { wait } else { TICK }) {
            Ok(input) => {
                app.apply(input);
                dirty = true;
                // Take what else is queued, so a burst costs one frame.
                while let Ok(more) = rx.try_recv() {
                    app.apply(more);
                }
            }
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => return Ok(()),
        }
        if app.quit {
            return Ok(());
        }
        if dirty && last_draw.is_none_or(|t| t.elapsed() >= FRAME) {
            terminal.draw(|f| draw(f, app)).map_err(Into::into)?;
            last_draw = Some(Instant::now());
            dirty = false;
        }
    }
}

/// Map a terminal key to a dashboard key.
pub fn key_of(code: KeyCode, modifiers: KeyModifiers) -> Option<Key> {
    Some(match code {
        KeyCode::Char('c') if modifiers.contains(KeyModifiers::CONTROL) => Key::Interrupt,
        KeyCode::Char('q') => Key::Quit,
        KeyCode::Char('d') => Key::Detach,
        KeyCode::Up | KeyCode::Char('k') => Key::Up,
        KeyCode::Down | KeyCode::Char('j') => Key::Down,
        KeyCode::PageUp => Key::PageUp,
        KeyCode::PageDown => Key::PageDown,
        KeyCode::Char('s') => Key::Sort,
        KeyCode::Char('p') => Key::Pause,
        KeyCode::Char('?') => Key::Help,
        _ => return None,
    })
}

fn read_keys(tx: &Sender<Input>) {
    loop {
        let input = match event::poll(TICK) {
            Ok(true) => match event::read() {
                Ok(TermEvent::Key(k)) if k.kind != KeyEventKind::Release => {
                    match key_of(k.code, k.modifiers) {
                        Some(key) => Input::Key(key),
                        None => continue,
                    }
                }
                Ok(_) => Input::Tick, // a resize redraws
                Err(_) => return,
            },
            Ok(false) => Input::Tick,
            Err(_) => return,
        };
        if tx.send(input).is_err() {
            return;
        }
    }
}
