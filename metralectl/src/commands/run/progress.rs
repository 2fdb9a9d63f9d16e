//! Progress on stderr while an engine starts and while an image is pulled: indicatif bars on a
//! terminal, one note a step otherwise (logs, CI), nothing with `--quiet`.

use std::collections::HashMap;
use std::time::Duration;

use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::docker::PullEvent;
use crate::printer::Printer;
use crate::startup::Event;

/// One bar for a checkpoint's download: the file, bytes done of its size, rate and ETA on a
/// terminal; a note when a file starts and when it is complete otherwise. A file whose first
/// report is past 0 bytes resumed a partial download, and says so.
pub struct Download<'a> {
    printer: &'a Printer,
    bar: Option<ProgressBar>,
    file: Option<String>,
    /// Drawn with other bars (run's spinner) when given, so they do not overwrite each other.
    multi: Option<MultiProgress>,
}

impl<'a> Download<'a> {
    pub fn new(printer: &'a Printer) -> Self {
        Self {
            printer,
            bar: None,
            file: None,
            multi: None,
        }
    }

    /// A bar drawn below the others of `multi`.
    fn within(printer: &'a Printer, multi: Option<MultiProgress>) -> Self {
        Self {
            multi,
            ..Self::new(printer)
        }
    }

    /// `done` of `total` bytes of `file`.
    pub fn update(&mut self, file: &str, done: u64, total: u64) {
        let new_file = self.file.as_deref() != Some(file);
        if new_file {
            self.file = Some(file.to_owned());
            let resumed = if done > 0 && done < total {
                format!(" (resumed at {:.1} MB)", done as f64 / 1e6)
            } else {
                String::new()
            };
            match self.bar_for() {
                Some(bar) => {
                    bar.reset();
                    bar.set_length(total);
                    bar.set_message(format!("{file}{resumed}"));
                }
                None if done == total => self.printer.note(format!(
                    "download {file}: {:.1} MB, already in the cache",
                    total as f64 / 1e6
                )),
                None => self.printer.note(format!(
                    "download {file}: {:.1} MB{resumed}",
                    total as f64 / 1e6
                )),
            }
        }
        match &self.bar {
            Some(bar) => {
                bar.set_length(total);
                bar.set_position(done);
            }
            None if done == total && !new_file => {
                self.printer.note(format!("download {file}: complete"));
            }
            None => {}
        }
    }

    /// A note that does not break the bar (it is drawn again below).
    pub fn note(&self, text: impl std::fmt::Display) {
        match &self.bar {
            Some(bar) => bar.suspend(|| self.printer.note(text)),
            None => self.printer.note(text),
        }
    }

    /// The bar, made on first use (on a terminal only).
    fn bar_for(&mut self) -> Option<&ProgressBar> {
        if self.bar.is_none() && self.printer.live_progress() {
            let bar = match &self.multi {
                Some(multi) => multi.add(ProgressBar::new(0)),
                None => ProgressBar::new(0),
            };
            bar.set_style(
                ProgressStyle::with_template(
                    "download {msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec} ETA {eta}",
                )
                .unwrap_or_else(|_| ProgressStyle::default_bar())
                .progress_chars("=> "),
            );
            self.bar = Some(bar);
        }
        self.bar.as_ref()
    }

    pub fn finish(&mut self) {
        if let Some(bar) = self.bar.take() {
            bar.finish_and_clear();
        }
    }
}

/// The start-up spinner (and the download bar while the engine fetches its checkpoint).
pub struct Startup<'a> {
    printer: &'a Printer,
    name: String,
    bar: Option<ProgressBar>,
    download: Download<'a>,
    /// The phase last written as a note (without a terminal a phase gets one line when it
    /// starts and one when it completes, not one per progress step).
    noted_phase: Option<String>,
}

impl<'a> Startup<'a> {
    pub fn new(printer: &'a Printer, name: &str) -> Self {
        let multi = printer
            .live_progress()
            .then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        let bar = multi.as_ref().map(|multi| {
            let bar = multi.add(ProgressBar::new_spinner());
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
            download: Download::within(printer, multi),
        }
    }

    pub fn event(&mut self, event: &Event) {
        // The checkpoint's download has a bar of its own.
        if let Event::Phase {
            name,
            done: Some(done),
            total: Some(total),
            unit,
            message: Some(file),
        } = event
            && name == "download"
            && unit == "bytes"
        {
            if let Some(bar) = &self.bar {
                bar.set_message(format!("{}: downloading the checkpoint", self.name));
            }
            self.download.update(file, *done, *total);
            return;
        }
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
        self.download.finish();
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
