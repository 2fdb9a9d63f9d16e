//! Progress on stderr while an engine starts and while an image is pulled: indicatif bars on a
//! terminal, one note a step otherwise (logs, CI), nothing with `--quiet`.

use std::collections::HashMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::docker::PullEvent;
use crate::printer::Printer;
use crate::startup::Event;

/// The start-up spinner.
pub struct Startup<'a> {
    printer: &'a Printer,
    name: String,
    bar: Option<ProgressBar>,
    /// The phase last written as a note (without a terminal a phase gets one line when it
    /// starts and one when it completes, not one per progress step).
    noted_phase: Option<String>,
}

impl<'a> Startup<'a> {
    pub fn new(printer: &'a Printer, name: &str) -> Self {
        let bar = printer.live_progress().then(|| {
            let bar = ProgressBar::new_spinner();
            bar.set_style(
                ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner()),
            );
            bar.enable_steady_tick(Duration::from_millis(120));
            bar
        });
        Self {
            printer,
            name: name.to_owned(),
            bar,
            noted_phase: None,
        }
    }

    pub fn event(&mut self, event: &Event) {
        let text = match event {
            Event::Starting => format!("{}: starting the engine", self.name),
            Event::Loading => format!("{}: server up, loading the model", self.name),
            Event::Phase {
                name,
                done,
                total,
                unit,
                message,
            } => {
                let progress = match (done, total) {
                    (Some(d), Some(t)) if *t > 0 && unit == "bytes" => {
                        format!(" {:.1}/{:.1} MB", *d as f64 / 1e6, *t as f64 / 1e6)
                    }
                    (Some(d), Some(t)) if *t > 0 => format!(" {d}/{t} {unit}"),
                    _ => String::new(),
                };
                let about = message
                    .as_deref()
                    .map_or(String::new(), |m| format!(" ({m})"));
                format!("{}: {name}{progress}{about}", self.name)
            }
            Event::Ready => format!("{}: ready", self.name),
        };
        match &self.bar {
            Some(bar) => bar.set_message(text),
            None => {
                if let Event::Phase {
                    name, done, total, ..
                } = event
                {
                    let complete = total.is_some_and(|t| Some(t) == *done);
                    if self.noted_phase.as_deref() == Some(name.as_str()) && !complete {
                        return;
                    }
                    self.noted_phase = Some(name.clone());
                }
                self.printer.note(text)
            }
        }
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// One bar a layer while pulling.
pub struct Layers<'a> {
    printer: &'a Printer,
    multi: Option<MultiProgress>,
    bars: HashMap<String, ProgressBar>,
}

impl<'a> Layers<'a> {
    pub fn new(printer: &'a Printer) -> Self {
        let multi = printer
            .live_progress()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        Self {
            printer,
            multi,
            bars: HashMap::new(),
        }
    }

    pub fn event(&mut self, (layer, status, done, total): &PullEvent) {
        let Some(multi) = &self.multi else {
            if layer.is_empty() {
                self.printer.note(status);
            }
            return;
        };
        if layer.is_empty() {
            let _ = multi.println(status);
            return;
        }
        let bar = self.bars.entry(layer.clone()).or_insert_with(|| {
            let bar = multi.add(ProgressBar::new(0));
            bar.set_style(
                ProgressStyle::with_template("{prefix:12} {msg:20} {bar:30} {bytes}/{total_bytes}")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            bar.set_prefix(layer.chars().take(12).collect::<String>());
            bar
        });
        bar.set_message(status.clone());
        if let Some(t) = total {
            bar.set_length(*t);
        }
        if let Some(d) = done {
            bar.set_position(*d);
        }
        if status.starts_with("Pull complete") || status.starts_with("Already exists") {
            bar.finish();
        }
    }

    pub fn finish(&mut self) {
        for bar in self.bars.values() {
            bar.finish_and_clear();
        }
    }
}
