//! The live view (ratatui): the supervision tree with each child's state, generation, restarts, messages
//! per second and heartbeat age; the dead letters; the recent events. [`draw`] renders a [`Snapshot`] into
//! any ratatui frame (the tests use a `TestBackend`); [`LiveView`] owns the terminal while the command runs.

use std::time::Duration;

use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
use ratatui::layout::{Constraint, Direction, Layout};
use ratatui::style::{Color, Modifier, Style};
use ratatui::widgets::{Block, Borders, List, ListItem, Paragraph, Row, Table};
use ratatui::{DefaultTerminal, Frame};
use ringvisor_supervisor::{DeadLetterReason, RunState};

use super::monitor::{ChildKind, Snapshot};
use super::report::progress_line;

fn state_style(state: RunState) -> Style {
    match state {
        RunState::Running => Style::default().fg(Color::Green),
        RunState::Restarting => Style::default().fg(Color::Yellow),
        RunState::Undefined => Style::default().fg(Color::Red),
    }
}

/// Renders `snap` under `title`.
pub fn draw(frame: &mut Frame, snap: &Snapshot, title: &str) {
    let [header, body, bottom] = Layout::default()
        .direction(Direction::Vertical)
        .constraints([Constraint::Length(3), Constraint::Min(6), Constraint::Length(9)])
        .areas(frame.area());
    let devices: Vec<&str> = snap.devices.iter().map(|d| d.describe.as_str()).collect();
    let head = Paragraph::new(format!("{}\n{} | q or Ctrl-C: stop in order", progress_line(snap), devices.join("; ")))
        .block(Block::default().borders(Borders::ALL).title(format!(" {title} ")));
    frame.render_widget(head, header);

    // Only the rows that fit are built (a tree of 100,000 children would otherwise cost 100,000 rows a frame):
    // the table's borders and header take three lines.
    let fits = usize::from(body.height.saturating_sub(3));
    let rows = snap.rows.iter().take(fits).map(|r| {
        let kind = match r.kind {
            ChildKind::Supervisor => "sup",
            ChildKind::Gpu => "gpu",
            ChildKind::Host => "host",
        };
        let opt = |v: Option<String>| v.unwrap_or_else(|| "-".into());
        Row::new(vec![
            format!("{}{}", "  ".repeat(r.depth), r.id),
            kind.to_string(),
            r.state.label().to_string(),
            opt(r.device.map(|d| d.to_string())),
            opt(r.slot.map(|s| s.to_string())),
            opt(r.generation.map(|g| g.to_string())),
            r.restarts.to_string(),
            if r.kind == ChildKind::Gpu { format!("{:.0}", r.msgs_per_sec) } else { "-".into() },
            opt(r.heartbeat_age.map(|a| format!("{} ms", a.as_millis()))),
        ])
        .style(state_style(r.state))
    });
    let widths = [
        Constraint::Min(24),
        Constraint::Length(5),
        Constraint::Length(11),
        Constraint::Length(4),
        Constraint::Length(6),
        Constraint::Length(5),
        Constraint::Length(9),
        Constraint::Length(9),
        Constraint::Length(11),
    ];
    let table = Table::new(rows, widths)
        .header(
            Row::new(["child", "kind", "state", "dev", "slot", "gen", "restarts", "msg/s", "heartbeat"])
                .style(Style::default().add_modifier(Modifier::BOLD)),
        )
        .block(Block::default().borders(Borders::ALL).title(if fits < snap.rows.len() {
            format!(" supervision tree ({} children, the first {fits} shown) ", snap.rows.len())
        } else {
            format!(" supervision tree ({} children) ", snap.rows.len())
        }));
    frame.render_widget(table, body);

    let [dead, events] = Layout::default()
        .direction(Direction::Horizontal)
        .constraints([Constraint::Percentage(40), Constraint::Percentage(60)])
        .areas(bottom);
    let mut lines: Vec<ListItem> = DeadLetterReason::ALL
        .iter()
        .filter(|r| snap.dead_letters.count(**r) > 0)
        .map(|r| ListItem::new(format!("{:<17} {}", r.label(), snap.dead_letters.count(*r))))
        .collect();
    lines.extend(snap.recent_dead_letters.iter().rev().take(3).map(|l| ListItem::new(format!("  {l}"))));
    let dead_list = List::new(lines)
        .block(Block::default().borders(Borders::ALL).title(format!(" dead letters ({}) ", snap.dead_letters.total())));
    frame.render_widget(dead_list, dead);
    let recent: Vec<ListItem> = snap.recent_events.iter().rev().map(|e| ListItem::new(e.as_str())).collect();
    frame.render_widget(
        List::new(recent).block(Block::default().borders(Borders::ALL).title(" recent events ")),
        events,
    );
}

/// The terminal while the live view runs (raw mode, alternate screen); restored on drop.
pub struct LiveView {
    terminal: DefaultTerminal,
}

impl LiveView {
    /// Takes over the terminal.
    pub fn enter() -> Self {
        Self { terminal: ratatui::init() }
    }

    /// Draws one frame.
    pub fn draw(&mut self, snap: &Snapshot, title: &str) -> std::io::Result<()> {
        self.terminal.draw(|f| draw(f, snap, title)).map(|_| ())
    }

    /// Waits up to `timeout` for a key; true if it asks to stop (`q`, Esc, or Ctrl-C, which raw mode turns
    /// into a key instead of a signal).
    pub fn wants_stop(&self, timeout: Duration) -> bool {
        if !event::poll(timeout).unwrap_or(false) {
            return false;
        }
        match event::read() {
            Ok(Event::Key(k)) if k.kind == KeyEventKind::Press => {
                matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL))
            }
            _ => false,
        }
    }
}

impl Drop for LiveView {
    fn drop(&mut self) {
        ratatui::restore();
    }
}
