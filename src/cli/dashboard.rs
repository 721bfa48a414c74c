//! The terminal driver of the dashboard: owns the terminal (raw mode, alternate screen, no mouse
//! capture so text selection over ssh keeps working), a data `Source` (live sockets or a recording)
//! and the `Model`; builds a `ViewModel` at 4 Hz and draws it with `sigmatop_tui::draw`.
//!
//! The terminal is restored on every way out: normal return, error, and panic (a guard's Drop and
//! a panic hook).

use std::io::{self, Write};
use std::sync::Once;
use std::time::{Duration, Instant};

use crossterm::event::{self, Event as TermEvent, KeyEvent};
use crossterm::{cursor, execute, terminal};
use ratatui::Terminal;
use ratatui::backend::{Backend, CrosstermBackend};
use sigmatop_tui::{Action, App, Theme, ViewModel};

use super::CliResult;
use super::view_model::{self, ClockStyle, Sections, ViewOptions};
use crate::agg::Model;
use crate::agg::window;

/// Redraw period (4 Hz).
pub const REFRESH: Duration = Duration::from_millis(250);
/// Longest wait for input before the source is polled again: short enough that a socket carrying
/// a burst of sampled events is drained before its buffer fills.
pub const INPUT_POLL: Duration = Duration::from_millis(10);

/// Where the model's data comes from.
pub trait Source {
    /// Applies what is available now; never blocks. Returns how much was applied.
    fn poll(&mut self, model: &mut Model) -> usize;
    /// "live", "replay out/", "demo".
    fn label(&self) -> String;
    fn clock_style(&self) -> ClockStyle {
        ClockStyle::Wall
    }
    /// The user paused or resumed the view.
    fn set_paused(&mut self, _paused: bool) {}
    /// Pause stops collection too (replay: the clock stops); live collection never stops.
    fn pauses_collection(&self) -> bool {
        false
    }
    /// Replay speed up or down.
    fn change_speed(&mut self, _d: i32) {}
    /// Step forward past the newest sample (replay while stopped). False when not possible.
    fn step_forward(&mut self, _model: &mut Model, _samples: i32) -> bool {
        false
    }
    /// A line for the status bar: what the source is doing.
    fn note(&self) -> Option<String> {
        None
    }
    /// Ctrl-C in the dashboard. Returns true when the dashboard should close now (the default:
    /// Ctrl-C leaves like `q`); a source that runs a program forwards it there instead.
    fn interrupt(&mut self) -> bool {
        true
    }
    /// What Ctrl-C does, for the key line ("stop ucx_perftest"); None when it leaves like `q`.
    fn interrupt_label(&self) -> Option<String> {
        None
    }
    /// Why no process is listed, when the source knows (a run that traced nothing).
    fn empty_hint(&self) -> Option<String> {
        None
    }
    /// Why the Collectives view is empty, when the source knows.
    fn collectives_hint(&self) -> Option<String> {
        None
    }
    /// The source is done and the dashboard should close (a program stopped by a forwarded
    /// Ctrl-C has exited).
    fn wants_to_leave(&self) -> bool {
        false
    }
    /// Longest wait between polls when no key arrives. Live sockets are drained every
    /// INPUT_POLL; a source that nothing pushes into (a recording) is polled only when a refresh
    /// is due, which shows the same view without waking up 100 times a second.
    fn poll_every(&self) -> Duration {
        INPUT_POLL
    }
}

/// Dashboard state without the terminal: testable and usable with any ratatui backend.
pub struct Dashboard<S: Source> {
    pub app: App,
    pub model: Model,
    pub source: S,
    pub vm: ViewModel,
    /// History position shown (None: the newest data).
    pub at: Option<u64>,
    last_build: Option<Instant>,
    cache: view_model::ViewCache,
    /// New data arrived, or the view options changed, since the last build.
    dirty: bool,
    /// What the model looked like at the last poll (to see changes `poll` does not count).
    mark: ModelMark,
    /// Wall-clock second of the last build of a live view (its clock and "now" rates move on
    /// even when no data arrives).
    built_second: Option<u64>,
    /// The source's note as last shown (the status line's notice).
    note: Option<String>,
    /// What the last build filled: the sections the tab shown then draws.
    built: Sections,
}

/// A cheap fingerprint of what a poll can change besides applied frames: messages, processes
/// that appear, exit or fail.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct ModelMark {
    messages: usize,
    processes: usize,
    exited: usize,
    problems: usize,
}

impl ModelMark {
    fn of(m: &Model) -> ModelMark {
        ModelMark {
            messages: m.messages.len(),
            processes: m.processes.len(),
            exited: m.processes.values().filter(|p| p.exited).count(),
            problems: m.processes.values().filter(|p| p.problem.is_some()).count(),
        }
    }
}

impl<S: Source> Dashboard<S> {
    pub fn new(source: S, app: App) -> Self {
        Dashboard {
            app,
            model: Model::new(),
            source,
            vm: ViewModel::default(),
            at: None,
            last_build: None,
            cache: view_model::ViewCache::default(),
            dirty: true,
            mark: ModelMark::default(),
            built_second: None,
            note: None,
            built: Sections::ALL,
        }
    }

    pub fn options(&self) -> ViewOptions {
        ViewOptions {
            window: self.app.window,
            at: self.at,
            source: self.source.label(),
            clock: self.source.clock_style(),
            now_ns: (self.at.is_none() && self.source.clock_style() == ClockStyle::Wall)
                .then(wall_ns),
        }
    }

    /// Rebuilds the view model from the model now: what the current tab draws.
    pub fn rebuild(&mut self) {
        let opts = self.options();
        self.built = Sections::of_tab(self.app.tab);
        view_model::build_sections_into(
            &self.model,
            &opts,
            self.built,
            &mut self.cache,
            &mut self.vm,
        );
        self.built_second = opts.now_ns.map(|n| n / 1_000_000_000);
        self.note = self.source.note();
        self.vm.status.notice = self.note.clone();
        self.app.interrupt_label = self.source.interrupt_label();
        self.app.empty_hint = self.source.empty_hint();
        self.app.collectives_hint = self.source.collectives_hint();
        self.dirty = false;
        self.last_build = Some(Instant::now());
    }

    /// Polls the source; at most every REFRESH, rebuilds the view when new data arrived (or, for a
    /// live view, when the wall-clock second moved on), and refreshes the source's note. Returns
    /// true when the view changed (a draw is needed). A paused view stays frozen.
    pub fn tick(&mut self) -> bool {
        let applied = self.source.poll(&mut self.model);
        if applied > 0 {
            self.dirty = true;
        }
        let due = self.last_build.is_none_or(|t| t.elapsed() >= REFRESH);
        if !due {
            return false;
        }
        // What a poll changed without applying frames matters only to the build that is due
        // now (the mark walks every process: not 100 times a second).
        let mark = ModelMark::of(&self.model);
        if mark != self.mark {
            self.dirty = true;
            self.mark = mark;
        }
        if !self.app.paused {
            let second_moved = self.built_second.is_some_and(|s| {
                self.at.is_none()
                    && self.source.clock_style() == ClockStyle::Wall
                    && s != wall_ns() / 1_000_000_000
            });
            if self.dirty || second_moved {
                self.rebuild();
                return true;
            }
        }
        // Nothing new to build: keep the view, but refresh the source's note (e.g. "child
        // exited", "replay finished").
        self.last_build = Some(Instant::now());
        let label = self.source.interrupt_label();
        let note = self.source.note();
        let hint = self.source.empty_hint();
        if hint != self.app.empty_hint {
            self.app.empty_hint = hint;
            return true;
        }
        if label != self.app.interrupt_label {
            self.app.interrupt_label = label;
            self.note = note;
            self.vm.status.notice = self.note.clone();
            return true;
        }
        if note != self.note {
            self.note = note;
            self.vm.status.notice = self.note.clone();
            return true;
        }
        false
    }

    /// How long the loop may wait for input before it calls `tick` again.
    pub fn wait(&self) -> Duration {
        self.until_due().min(self.source.poll_every())
    }

    /// Time until the next refresh is due.
    pub fn until_due(&self) -> Duration {
        self.last_build
            .map_or(Duration::ZERO, |t| REFRESH.saturating_sub(t.elapsed()))
    }

    /// Handles a key; returns true when the user quits.
    pub fn on_key(&mut self, key: KeyEvent) -> bool {
        match self.app.handle_key(key) {
            Action::Quit => return true,
            Action::Interrupt => {
                if self.source.interrupt() {
                    return true;
                }
                self.note = self.source.note();
                self.vm.status.notice = self.note.clone();
                self.app.interrupt_label = self.source.interrupt_label();
            }
            Action::None | Action::Redraw => {
                // Another tab draws other sections: build them before it is drawn.
                if Sections::of_tab(self.app.tab) != self.built {
                    self.rebuild();
                }
            }
            Action::SetWindow(_) => self.rebuild(),
            Action::StepHistory(d) => {
                if d > 0 && self.at.is_none_or(|t| t >= self.model.latest_ns()) {
                    if self.source.step_forward(&mut self.model, d) {
                        self.at = self.app.paused.then(|| self.model.latest_ns());
                    }
                } else {
                    self.at = window::step(&self.model, self.at, d);
                    if self.at.is_none() && self.app.paused {
                        self.at = Some(self.model.latest_ns());
                    }
                }
                self.rebuild();
            }
            Action::TogglePause(paused) => {
                self.source.set_paused(paused);
                if paused {
                    self.at.get_or_insert(self.model.latest_ns());
                } else {
                    self.at = None;
                }
                self.rebuild();
            }
            Action::ChangeSpeed(d) => {
                self.source.change_speed(d);
                self.note = self.source.note();
                self.vm.status.notice = self.note.clone();
            }
        }
        false
    }

    pub fn draw<B: Backend>(&self, term: &mut Terminal<B>) -> io::Result<()> {
        term.draw(|f| sigmatop_tui::draw(f, &self.app, &self.vm))
            .map(|_| ())
    }
}

/// CLOCK_REALTIME in ns.
fn wall_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// Puts the terminal back: raw mode off, main screen, cursor shown. Idempotent.
pub fn restore_terminal() {
    let _ = terminal::disable_raw_mode();
    let mut out = io::stdout();
    let _ = execute!(out, terminal::LeaveAlternateScreen, cursor::Show);
    let _ = out.flush();
}

/// Raw mode and the alternate screen for as long as it lives.
struct TerminalGuard;

impl TerminalGuard {
    fn enter() -> io::Result<TerminalGuard> {
        static HOOK: Once = Once::new();
        HOOK.call_once(|| {
            let prev = std::panic::take_hook();
            std::panic::set_hook(Box::new(move |info| {
                restore_terminal();
                prev(info);
            }));
        });
        terminal::enable_raw_mode()?;
        let guard = TerminalGuard;
        // Mouse capture stays off: selecting text with the mouse must keep working over ssh.
        execute!(io::stdout(), terminal::EnterAlternateScreen, cursor::Hide)?;
        Ok(guard)
    }
}

impl Drop for TerminalGuard {
    fn drop(&mut self) {
        restore_terminal();
    }
}

/// Runs a dashboard on the terminal until the user quits; gives the dashboard back.
pub fn run_terminal<S: Source>(dash: Dashboard<S>) -> Result<Dashboard<S>, String> {
    let (dash, res) = run_terminal_keep(dash);
    res.map(|()| dash)
}

/// [`run_terminal`] that gives the dashboard back on a terminal error too (the program `sigmatop
/// run` started is in it, still to be waited for). A hangup of the terminal ends it (Ok).
pub fn run_terminal_keep<S: Source>(mut dash: Dashboard<S>) -> (Dashboard<S>, Result<(), String>) {
    super::child::watch_hangup();
    let guard = match TerminalGuard::enter() {
        Ok(g) => g,
        Err(e) => return (dash, Err(format!("cannot set up the terminal: {e}"))),
    };
    // One write per frame (stdout alone is line-buffered with a small buffer, and a frame is a
    // run of escape sequences without newlines): fewer system calls and fewer ssh packets.
    let out = io::BufWriter::with_capacity(1 << 16, io::stdout());
    let mut term = match Terminal::new(CrosstermBackend::new(out)) {
        Ok(t) => t,
        Err(e) => return (dash, Err(format!("cannot set up the terminal: {e}"))),
    };
    let res = (|| -> io::Result<()> {
        let mut need_draw = true;
        loop {
            if dash.tick() {
                need_draw = true;
            }
            if dash.source.wants_to_leave() || super::child::leave_requested() {
                return Ok(());
            }
            if need_draw {
                dash.draw(&mut term)?;
                need_draw = false;
            }
            let wait = dash.wait();
            if event::poll(wait)? {
                // Drain everything queued before drawing again (fast typing, pasted filters).
                loop {
                    match event::read()? {
                        TermEvent::Key(k) => {
                            if dash.on_key(k) {
                                return Ok(());
                            }
                            need_draw = true;
                        }
                        TermEvent::Resize(_, _) => {
                            term.autoresize()?;
                            need_draw = true;
                        }
                        _ => {}
                    }
                    if super::child::leave_requested() || !event::poll(Duration::ZERO)? {
                        break;
                    }
                }
            }
        }
    })();
    // ratatui's Drop shows the cursor and, should that fail (a terminal that hung up), says so
    // with eprintln!, which panics when stderr is that dead terminal too: show it here, and keep
    // the terminal from its Drop when it cannot be shown (restore_terminal tries again).
    if term.show_cursor().is_ok() {
        drop(term);
    } else {
        std::mem::forget(term);
    }
    drop(guard);
    if super::child::hung_up() {
        // Writes to a dead terminal fail: that is the hangup, not an error of its own.
        return (dash, Ok(()));
    }
    (dash, res.map_err(|e| format!("terminal: {e}")))
}

/// The dashboard over `source`, with the theme from `--theme` / `NO_COLOR`.
pub fn run<S: Source>(source: S, theme: Option<&str>) -> CliResult {
    run_with_model(source, Model::new(), theme)
}

/// [`run`] from a model the source has already set up (the remote hosts of `attach HOST...`).
pub fn run_with_model<S: Source>(source: S, model: Model, theme: Option<&str>) -> CliResult {
    let theme = Theme::from_env(theme).map_err(|e| e.to_string())?;
    let mut dash = Dashboard::new(source, App::new(theme));
    dash.model = model;
    run_terminal(dash)?;
    Ok(0)
}
