//! Drawing: a pure function of [`App`]. Nothing here reads a clock or a socket, so the render
//! tests' snapshots are exact.

use metrale_protocol::metrics::{Phase, RequestState};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style, Stylize};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Cell, Clear, Gauge, Paragraph, Row as TRow, Sparkline, Table};

use crate::app::{App, Conn, Model, Row};

/// Draw the whole dashboard into `frame`.
pub fn draw(frame: &mut Frame, app: &App) {
    let area = frame.area();
    let m = app.view();
    let [header, status, body, footer] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Min(0),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header_line(m)), header);
    frame.render_widget(Paragraph::new(status_line(app)), status);
    if m.ready() {
        let [top, gauges, table] = Layout::vertical([
            Constraint::Length(6),
            Constraint::Length(5),
            Constraint::Min(3),
        ])
        .areas(body);
        throughput(frame, m, top);
        engine_state(frame, m, gauges);
        requests(frame, app, table);
    } else {
        let [phases, table] =
            Layout::vertical([Constraint::Length(12), Constraint::Min(0)]).areas(body);
        start_up(frame, m, phases);
        if table.height >= 3 {
            requests(frame, app, table);
        }
    }
    frame.render_widget(Paragraph::new(footer_line(app)), footer);
    if app.help {
        help(frame, area);
    }
}

fn header_line(m: &Model) -> Line<'static> {
    let mut spans = vec![" metrale top ".bold().reversed(), " ".into()];
    match &m.hello {
        Some(h) => {
            spans.push(Span::styled(h.model.clone(), Style::new().bold()));
            spans.push(format!("  met {} · {} · pid {}", h.engine_version, h.device, h.pid).into());
            if let Some(url) = &h.http_url {
                spans.push(format!(" · {url}").dim());
            }
        }
        None => spans.push("waiting for the engine…".dim()),
    }
    Line::from(spans)
}

fn status_line(app: &App) -> Line<'static> {
    let conn = match &app.conn {
        Conn::Connecting => Span::styled(
            format!("○ connecting to {}", app.target),
            Style::new().yellow(),
        ),
        Conn::Live => Span::styled(format!("● {}", app.target), Style::new().green()),
        Conn::Lost { reason, attempts } => Span::styled(
            format!(
                "✗ disconnected, retrying (attempt {attempts}): {reason} · {}",
                app.target
            ),
            Style::new().red().bold(),
        ),
    };
    let mut spans = vec![" ".into()];
    if app.paused() {
        spans.push(" PAUSED ".black().on_yellow());
        spans.push(" ".into());
    }
    spans.push(conn);
    if app.serving && app.view().ready() {
        // The line the README tells a `met serve` user to wait for.
        spans.push("  ".into());
        spans.push(" ready ".black().on_green().bold());
        if let Some(url) = app.view().hello.as_ref().and_then(|h| h.http_url.clone()) {
            spans.push(format!(" {url}/v1").green());
        }
    }
    if let Some(n) = &app.notice {
        spans.push("  ".into());
        spans.push(Span::styled(n.clone(), Style::new().yellow()));
    }
    Line::from(spans)
}

fn footer_line(app: &App) -> Line<'static> {
    if app.confirm_quit {
        return Line::from(vec![
            " Stop the server? ".black().on_yellow().bold(),
            " q".bold(),
            " stop it  ".into(),
            "d".bold(),
            " leave the dashboard, keep serving  ".into(),
            "any other key".bold(),
            " stay".into(),
        ]);
    }
    let quit: Vec<Span<'static>> = if app.serving {
        vec![" q".bold(), " stop  ".dim(), "d".bold(), " detach  ".dim()]
    } else {
        vec![" q".bold(), " quit  ".dim()]
    };
    Line::from_iter(
        quit.into_iter().chain([
            "↑↓/jk".bold(),
            " scroll  ".dim(),
            "s".bold(),
            format!(" sort: {}  ", app.sort.label()).dim(),
            "p".bold(),
            if app.paused() {
                " resume  "
            } else {
                " pause  "
            }
            .dim(),
            "?".bold(),
            " help".dim(),
        ]),
    )
}

fn start_up(frame: &mut Frame, m: &Model, area: Rect) {
    let block = Block::bordered().title(" start-up ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let mut lines = Vec::new();
    let current = m.current_phase().map(|p| p.phase);
    for p in &m.phases {
        let (mark, style) = match (p.phase, Some(p.phase) == current) {
            (Phase::Failed, _) => ("✗", Style::new().red().bold()),
            (_, true) => ("▸", Style::new().yellow().bold()),
            _ => ("✓", Style::new().green()),
        };
        let progress = match (p.total, p.unit.as_str()) {
            (Some(t), "bytes") => format!("{} / {}", bytes(p.done), bytes(t)),
            (Some(t), u) => format!("{} / {t} {u}", p.done),
            (None, "") => String::new(),
            (None, u) => format!("{} {u}", p.done),
        };
        let mut spans = vec![
            Span::styled(format!(" {mark} {:<18}", p.phase.name()), style),
            Span::raw(format!("{progress:<24}")),
            Span::raw(format!("{:>7.1}s ", p.t_ms as f64 / 1000.0)).dim(),
        ];
        if let Some(msg) = &p.message {
            spans.push(Span::raw(msg.clone()).dim());
        }
        lines.push(Line::from(spans));
    }
    if m.phases.is_empty() {
        lines.push(Line::from(" no start-up events yet".dim()));
    }
    let [text, gauge] = Layout::vertical([Constraint::Min(0), Constraint::Length(1)]).areas(inner);
    frame.render_widget(Paragraph::new(lines), text);
    if let Some(p) = m.current_phase()
        && let Some(total) = p.total.filter(|&t| t > 0)
        && p.phase != Phase::Failed
    {
        let ratio = (p.done as f64 / total as f64).clamp(0.0, 1.0);
        frame.render_widget(
            Gauge::default()
                .gauge_style(Style::new().yellow())
                .ratio(ratio)
                .label(format!("{} {:.0}%", p.phase.name(), ratio * 100.0)),
            gauge,
        );
    }
}

fn throughput(frame: &mut Frame, m: &Model, area: Rect) {
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let s = m.snapshot.clone().unwrap_or_default();
    let spark =
        |title: String, data: &std::collections::VecDeque<u64>, color: Color, area: Rect| {
            // Newest on the right: take the last `width` points.
            let width = area.width.saturating_sub(2) as usize;
            let skip = data.len().saturating_sub(width);
            let points: Vec<u64> = data.iter().skip(skip).copied().collect();
            Sparkline::default()
                .block(Block::bordered().title(title))
                .style(Style::new().fg(color))
                .data(points)
        };
    frame.render_widget(
        spark(
            format!(" prompt {:.0} tok/s ", s.prompt_tokens_per_s),
            &m.prompt_tps,
            Color::Cyan,
            left,
        ),
        left,
    );
    frame.render_widget(
        spark(
            format!(" generation {:.0} tok/s ", s.generation_tokens_per_s),
            &m.generation_tps,
            Color::Green,
            right,
        ),
        right,
    );
}

fn engine_state(frame: &mut Frame, m: &Model, area: Rect) {
    let s = m.snapshot.clone().unwrap_or_default();
    let [gauges, text] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let block = Block::bordered().title(" batch and cache ");
    let inner = block.inner(gauges);
    frame.render_widget(block, gauges);
    let rows = Layout::vertical([Constraint::Length(1); 3]).split(inner);
    let kv_ratio = if s.kv_blocks_total == 0 {
        0.0
    } else {
        s.kv_blocks_used as f64 / s.kv_blocks_total as f64
    };
    let gauge = |label: String, ratio: f64, color: Color| {
        Gauge::default()
            .gauge_style(Style::new().fg(color))
            .ratio(ratio.clamp(0.0, 1.0))
            .label(label)
    };
    frame.render_widget(
        gauge(
            format!("seqs {} / {}", s.step_seqs, s.max_step_seqs),
            s.batch_seqs_ratio,
            Color::Blue,
        ),
        rows[0],
    );
    frame.render_widget(
        gauge(
            format!("tokens {} / {}", s.step_tokens, s.max_step_tokens),
            s.batch_tokens_ratio,
            Color::Magenta,
        ),
        rows[1],
    );
    frame.render_widget(
        gauge(
            format!("KV {} / {} blocks", s.kv_blocks_used, s.kv_blocks_total),
            kv_ratio,
            if kv_ratio > 0.9 {
                Color::Red
            } else {
                Color::Green
            },
        ),
        rows[2],
    );
    let block = Block::bordered().title(" requests and latency (1 min) ");
    let inner = block.inner(text);
    frame.render_widget(block, text);
    let lines = vec![
        Line::from(vec![
            "running ".dim(),
            s.running_seqs.to_string().bold(),
            "  waiting ".dim(),
            s.waiting_seqs.to_string().bold(),
            "  preempted ".dim(),
            s.preemptions_total.to_string().bold(),
            "  done ".dim(),
            m.finished_total.to_string().bold(),
        ]),
        Line::from(vec![
            "TTFT p50/p95 ".dim(),
            format!("{} / {}", ms(s.ttft_p50_ms), ms(s.ttft_p95_ms)).bold(),
            "  prefix hit ".dim(),
            format!("{:.0}%", s.prefix_cache_hit_ratio * 100.0).bold(),
        ]),
        Line::from(vec![
            "ITL  p50/p95 ".dim(),
            format!("{} / {}", ms(s.itl_p50_ms), ms(s.itl_p95_ms)).bold(),
            "  steps/s ".dim(),
            format!("{:.0}", s.steps_per_s).bold(),
        ]),
    ];
    frame.render_widget(Paragraph::new(lines), inner);
}

fn requests(frame: &mut Frame, app: &App, area: Rect) {
    let (rows, slowest) = app.table();
    let total = rows.len();
    let visible = area.height.saturating_sub(3) as usize;
    let start = app.scroll.min(total.saturating_sub(visible.max(1)));
    let header = TRow::new(
        [
            "id",
            "state",
            "prompt",
            "generated",
            "TTFT",
            "ITL p50",
            "ITL p95",
            "tok/s",
        ]
        .map(|h| Cell::from(h).style(Style::new().bold())),
    );
    let body: Vec<TRow> = rows
        .iter()
        .skip(start)
        .take(visible)
        .map(|r| table_row(r, Some(r.id) == slowest))
        .collect();
    let title = format!(
        " requests ({total}) · sort: {} {}",
        app.sort.label(),
        if slowest.is_some() {
            "· slowest in red "
        } else {
            ""
        }
    );
    let table = Table::new(
        body,
        [
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(7),
            Constraint::Length(10),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(9),
            Constraint::Length(7),
        ],
    )
    .header(header)
    .block(Block::bordered().title(title));
    frame.render_widget(table, area);
}

fn table_row(r: &Row, slowest: bool) -> TRow<'static> {
    let state_style = match r.state {
        RequestState::Waiting => Style::new().yellow(),
        RequestState::Running => Style::new().green(),
        RequestState::Preempted => Style::new().magenta(),
        RequestState::Finished => Style::new().dim(),
        RequestState::Aborted => Style::new().red().dim(),
    };
    let state = match (&r.reason, r.state) {
        (Some(reason), RequestState::Finished) => reason.clone(),
        _ => r.state.name().to_owned(),
    };
    let row = TRow::new(vec![
        Cell::from(r.id.to_string()),
        Cell::from(state).style(state_style),
        Cell::from(r.prompt_tokens.to_string()),
        Cell::from(r.generated_tokens.to_string()),
        Cell::from(ms(r.ttft_ms)),
        Cell::from(ms(r.itl_p50_ms)),
        Cell::from(ms(r.itl_p95_ms)),
        Cell::from(if r.tokens_per_s > 0.0 {
            format!("{:.0}", r.tokens_per_s)
        } else {
            "-".into()
        }),
    ]);
    if slowest {
        row.style(Style::new().fg(Color::Red).add_modifier(Modifier::BOLD))
    } else {
        row
    }
}

fn help(frame: &mut Frame, area: Rect) {
    let w = 66.min(area.width);
    let h = 12.min(area.height);
    let rect = Rect {
        x: area.x + (area.width - w) / 2,
        y: area.y + (area.height - h) / 2,
        width: w,
        height: h,
    };
    let lines = vec![
        Line::from(" q, Ctrl-C    quit"),
        Line::from(" ↑ ↓, j k     scroll the requests"),
        Line::from(" PgUp PgDn    scroll a page"),
        Line::from(" s            sort: arrival, ITL p95, TTFT, tok/s, generated"),
        Line::from(" p            pause the view (data keeps coming)"),
        Line::from(" ?            this help; any key closes it"),
        Line::from(""),
        Line::from(" The slowest request (highest ITL p95) is in red.".dim()),
        Line::from(" Latency percentiles cover the last minute.".dim()),
    ];
    frame.render_widget(Clear, rect);
    frame.render_widget(
        Paragraph::new(lines).block(Block::bordered().title(" help ")),
        rect,
    );
}

/// `12.3ms`, `1.20s`, or `-`.
fn ms(v: Option<f64>) -> String {
    match v {
        None => "-".into(),
        Some(x) if x >= 1000.0 => format!("{:.2}s", x / 1000.0),
        Some(x) if x >= 100.0 => format!("{x:.0}ms"),
        Some(x) => format!("{x:.1}ms"),
    }
}

fn bytes(b: u64) -> String {
    let b = b as f64;
    if b >= 1e9 {
        format!("{:.2} GB", b / 1e9)
    } else if b >= 1e6 {
        format!("{:.1} MB", b / 1e6)
    } else if b >= 1e3 {
        format!("{:.1} kB", b / 1e3)
    } else {
        format!("{b} B")
    }
}
