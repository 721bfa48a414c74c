//! UI state of the dashboard and the key bindings: which tab, sort, filter, window, units, theme, and
//! what the driver must do after a key (`Action`). No terminal is needed to drive it.

use crate::query::Query;
use crate::theme::{BUILTIN, Theme};
use crate::units::Units;
use crate::warnings::WarningConfig;
use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use std::cell::Cell;

/// The dashboard's tabs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Tab {
    #[default]
    Overview,
    Qps,
    Gpus,
    Nodes,
    Matrix,
    Doorbells,
    /// NCCL collectives per communicator and rank.
    Collectives,
}

impl Tab {
    /// All tabs in bar order.
    pub const ALL: [Tab; 7] = [
        Tab::Overview,
        Tab::Qps,
        Tab::Gpus,
        Tab::Nodes,
        Tab::Matrix,
        Tab::Doorbells,
        Tab::Collectives,
    ];

    /// Position in [`Tab::ALL`].
    pub fn index(self) -> usize {
        Tab::ALL.iter().position(|t| *t == self).unwrap_or(0)
    }

    /// Title in the tab bar.
    pub fn title(self) -> &'static str {
        match self {
            Tab::Overview => "Overview",
            Tab::Qps => "QPs",
            Tab::Gpus => "GPUs",
            Tab::Nodes => "Nodes",
            Tab::Matrix => "Matrix",
            Tab::Doorbells => "Doorbells",
            Tab::Collectives => "Collectives",
        }
    }

    /// Key that selects it.
    pub fn key(self) -> char {
        match self {
            Tab::Overview => '1',
            Tab::Qps => '2',
            Tab::Gpus => '3',
            Tab::Nodes => '4',
            Tab::Matrix => '5',
            Tab::Doorbells => 'd',
            Tab::Collectives => 'c',
        }
    }
}

/// Time window over which windowed rates and matrix bytes are computed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Window {
    S1,
    #[default]
    S10,
    S60,
    All,
}

impl Window {
    pub const ALL: [Window; 4] = [Window::S1, Window::S10, Window::S60, Window::All];

    /// "1s", "10s", "60s", "all".
    pub fn label(self) -> &'static str {
        match self {
            Window::S1 => "1s",
            Window::S10 => "10s",
            Window::S60 => "60s",
            Window::All => "all",
        }
    }

    /// Length in seconds; None for the whole run.
    pub fn seconds(self) -> Option<u64> {
        match self {
            Window::S1 => Some(1),
            Window::S10 => Some(10),
            Window::S60 => Some(60),
            Window::All => None,
        }
    }

    fn step(self, d: i32) -> Window {
        let i = Window::ALL.iter().position(|w| *w == self).unwrap_or(1) as i32;
        Window::ALL[(i + d).clamp(0, 3) as usize]
    }

    fn cycle(self) -> Window {
        let i = Window::ALL.iter().position(|w| *w == self).unwrap_or(1);
        Window::ALL[(i + 1) % 4]
    }
}

/// Which communication matrix is shown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MatrixKind {
    Rank,
    Gpu,
    #[default]
    Node,
}

impl MatrixKind {
    pub fn label(self) -> &'static str {
        match self {
            MatrixKind::Rank => "rank",
            MatrixKind::Gpu => "GPU",
            MatrixKind::Node => "node",
        }
    }

    fn next(self) -> MatrixKind {
        match self {
            MatrixKind::Rank => MatrixKind::Gpu,
            MatrixKind::Gpu => MatrixKind::Node,
            MatrixKind::Node => MatrixKind::Rank,
        }
    }
}

/// Sort state of one table: column index (into the table's full column list) and direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sort {
    pub column: usize,
    pub descending: bool,
}

/// What the driver should do after a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Nothing changed.
    None,
    /// Leave the dashboard.
    Quit,
    /// Only UI state changed: draw again.
    Redraw,
    /// The user picked another time window: recompute windowed figures, then draw.
    SetWindow(Window),
    /// Step through kept samples: negative is older, positive newer.
    StepHistory(i32),
    /// Pause toggled; the new state is `true` when paused. Collection goes on; the driver keeps
    /// showing the frozen view model while paused.
    TogglePause(bool),
    /// Replay speed up (+1) or down (-1).
    ChangeSpeed(i32),
    /// Ctrl-C: the driver decides what it means (`sigmatop run` forwards it to the program it
    /// started, as a shell would; elsewhere it leaves like `q`).
    Interrupt,
}

/// The whole UI state. The view model is separate and owned by the driver.
#[derive(Clone, Debug)]
pub struct App {
    pub tab: Tab,
    /// Help overlay shown.
    pub help: bool,
    /// Current filter text (applied as typed).
    pub filter: String,
    /// The filter prompt has the keyboard.
    pub filter_editing: bool,
    /// The view is frozen (collection continues).
    pub paused: bool,
    pub window: Window,
    pub units: Units,
    pub theme: Theme,
    pub matrix_kind: MatrixKind,
    /// The matrix kind follows the data until the user picks one with `m`: the rank matrix when
    /// there is one node and several ranks (a node × node matrix would be one cell), else
    /// `matrix_kind`.
    pub matrix_auto: bool,
    /// Matrix shows rates (bytes/s) instead of bytes in the window.
    pub matrix_rate: bool,
    /// First matrix column shown when the columns do not all fit (`<` `>`, `h` `l`).
    pub matrix_col: usize,
    /// Selected row per tab.
    pub selected: [usize; 7],
    /// Sort per tab.
    pub sort: [Sort; 7],
    /// Thresholds of the live warnings.
    pub warning_config: WarningConfig,
    /// Mouse capture (off by default so text selection over ssh keeps working).
    pub mouse: bool,
    /// A one-off answer to the last key ("theme light"), shown in the key line until the next key.
    pub flash: Option<String>,
    /// What Ctrl-C does when it does more than leave ("stop ucx_perftest"): set by the driver,
    /// shown in the key line.
    pub interrupt_label: Option<String>,
    /// Why no process is listed, when the driver knows ("true used no RDMA library sigmatop
    /// traces …"): shown in the empty process table instead of "(none yet)".
    pub empty_hint: Option<String>,
    /// Why the Collectives view is empty, when the driver knows (a bundled recording whose NCCL
    /// events were left out): shown instead of the NCCL_PROFILER_PLUGIN hint.
    pub collectives_hint: Option<String>,
    filter_before_edit: String,
    /// The matrix kind as last drawn (where `m` moves on from).
    matrix_shown: Cell<MatrixKind>,
    /// Rows and visible rows of each tab as last drawn (to clamp cursor keys).
    rows_seen: [Cell<usize>; 7],
    page_seen: [Cell<usize>; 7],
    /// Columns of each tab's table as last drawn, one bit per column index (`s` cycles through
    /// these only: a column the terminal is too narrow for is no sort key the user can see).
    cols_seen: [Cell<u64>; 7],
}

impl Default for App {
    fn default() -> Self {
        App::new(Theme::dark())
    }
}

/// Default sort per tab: traffic tables by egress, descending; the nodes tab by name.
const DEFAULT_SORT: [Sort; 7] = [
    Sort {
        column: 5,
        descending: true,
    },
    Sort {
        column: 8,
        descending: true,
    },
    // GPUs: by WQE bytes/s (after host, process, GPU).
    Sort {
        column: 3,
        descending: true,
    },
    Sort {
        column: 0,
        descending: false,
    },
    Sort {
        column: 0,
        descending: false,
    },
    Sort {
        column: 0,
        descending: false,
    },
    // Collectives: by communicator, then as listed.
    Sort {
        column: 0,
        descending: false,
    },
];

impl App {
    /// A fresh UI state with the given theme.
    pub fn new(theme: Theme) -> App {
        App {
            tab: Tab::Overview,
            help: false,
            filter: String::new(),
            filter_editing: false,
            paused: false,
            window: Window::default(),
            units: Units::Bytes,
            theme,
            matrix_kind: MatrixKind::default(),
            matrix_auto: true,
            matrix_rate: false,
            matrix_col: 0,
            selected: [0; 7],
            sort: DEFAULT_SORT,
            warning_config: WarningConfig::default(),
            mouse: false,
            flash: None,
            interrupt_label: None,
            empty_hint: None,
            collectives_hint: None,
            filter_before_edit: String::new(),
            matrix_shown: Cell::new(MatrixKind::default()),
            rows_seen: Default::default(),
            page_seen: std::array::from_fn(|_| Cell::new(10)),
            cols_seen: Default::default(),
        }
    }

    /// Records, while drawing, which columns of the current tab's table are on screen (bit i for
    /// column i; columns past 63 are never sort keys).
    pub(crate) fn seen_columns(&self, shown: &[usize]) {
        let bits = shown
            .iter()
            .filter(|&&i| i < 64)
            .fold(0u64, |b, &i| b | (1 << i));
        self.cols_seen[self.tab.index()].set(bits);
    }

    /// The sort column after `column` among the columns on screen (wrapping); the next index when
    /// no table has been drawn yet.
    fn next_sort_column(&self, column: usize) -> usize {
        let bits = self.cols_seen[self.tab.index()].get();
        if bits == 0 {
            return column + 1;
        }
        let column = column.min(63);
        let after = if column >= 63 {
            0
        } else {
            bits & !((2u64 << column) - 1)
        };
        let pick = if after != 0 { after } else { bits };
        pick.trailing_zeros() as usize
    }

    /// Records, while drawing, how many rows the current tab has and how many fit on screen.
    pub(crate) fn seen(&self, rows: usize, page: usize) {
        let t = self.tab.index();
        self.rows_seen[t].set(rows);
        self.page_seen[t].set(page.max(1));
    }

    /// The matrix kind to show for a view with `nodes` nodes, `ranks` ranks and `gpus` GPU
    /// rows (see [`App::matrix_auto`]): on one node, ranks if there are several, else GPUs if
    /// any; remembered as the one shown.
    pub fn matrix_kind_for(&self, nodes: usize, ranks: usize, gpus: usize) -> MatrixKind {
        let k = if self.matrix_auto && self.matrix_kind == MatrixKind::Node && nodes <= 1 {
            if ranks > 1 {
                MatrixKind::Rank
            } else if gpus > 0 {
                MatrixKind::Gpu
            } else {
                MatrixKind::Node
            }
        } else {
            self.matrix_kind
        };
        self.matrix_shown.set(k);
        k
    }

    /// The parsed filter.
    pub fn parsed_filter(&self) -> Query {
        Query::parse(&self.filter)
    }

    /// Handles one key and says what the driver must do.
    pub fn handle_key(&mut self, key: KeyEvent) -> Action {
        if key.kind == KeyEventKind::Release {
            return Action::None;
        }
        let ctrl = key.modifiers.contains(KeyModifiers::CONTROL);
        // A flash answers one key; the next key takes it away.
        self.flash = None;
        if ctrl && matches!(key.code, KeyCode::Char('c')) {
            return Action::Interrupt;
        }
        if self.filter_editing {
            return self.filter_key(key, ctrl);
        }
        if self.help {
            return match key.code {
                KeyCode::Esc | KeyCode::Char('?') | KeyCode::Char('h') | KeyCode::Enter => {
                    self.help = false;
                    Action::Redraw
                }
                KeyCode::Char('q') => Action::Quit,
                _ => Action::None,
            };
        }
        let t = self.tab.index();
        match key.code {
            KeyCode::Char('q') => Action::Quit,
            KeyCode::Char('?') => {
                self.help = true;
                Action::Redraw
            }
            KeyCode::Esc => {
                if self.filter.is_empty() {
                    Action::None
                } else {
                    self.filter.clear();
                    Action::Redraw
                }
            }
            KeyCode::Char('/') => {
                self.filter_before_edit = self.filter.clone();
                self.filter_editing = true;
                Action::Redraw
            }
            KeyCode::Char(c @ '1'..='7') => {
                self.tab = Tab::ALL[(c as u8 - b'1') as usize];
                Action::Redraw
            }
            KeyCode::Char('d') => {
                self.tab = Tab::Doorbells;
                Action::Redraw
            }
            KeyCode::Char('c') => {
                self.tab = Tab::Collectives;
                Action::Redraw
            }
            KeyCode::Tab => {
                self.tab = Tab::ALL[(t + 1) % Tab::ALL.len()];
                Action::Redraw
            }
            KeyCode::BackTab => {
                self.tab = Tab::ALL[(t + Tab::ALL.len() - 1) % Tab::ALL.len()];
                Action::Redraw
            }
            KeyCode::Char(' ') | KeyCode::Char('p') => {
                self.paused = !self.paused;
                Action::TogglePause(self.paused)
            }
            KeyCode::Left => self.set_window(self.window.step(-1)),
            KeyCode::Right => self.set_window(self.window.step(1)),
            KeyCode::Char('w') => self.set_window(self.window.cycle()),
            KeyCode::Char('[') => Action::StepHistory(-1),
            KeyCode::Char(']') => Action::StepHistory(1),
            KeyCode::Char('{') => Action::StepHistory(-10),
            KeyCode::Char('}') => Action::StepHistory(10),
            KeyCode::Char('+') | KeyCode::Char('=') => Action::ChangeSpeed(1),
            KeyCode::Char('-') => Action::ChangeSpeed(-1),
            KeyCode::Char('u') => {
                self.units = match self.units {
                    Units::Bytes => Units::Bits,
                    Units::Bits => Units::Bytes,
                };
                Action::Redraw
            }
            KeyCode::Char('t') => {
                let i = BUILTIN
                    .iter()
                    .position(|n| *n == self.theme.name)
                    .map(|i| (i + 1) % BUILTIN.len())
                    .unwrap_or(0);
                self.theme = Theme::builtin(BUILTIN[i]).unwrap_or_else(|_| Theme::dark());
                self.flash = Some(format!(
                    "theme {} (t: next of {})",
                    self.theme.name,
                    BUILTIN.join(", ")
                ));
                Action::Redraw
            }
            KeyCode::Char('m') => {
                // Outside the matrix tab, `m` first jumps to it; there it cycles the kind.
                if self.tab == Tab::Matrix {
                    self.matrix_kind = self.matrix_shown.get().next();
                    self.matrix_auto = false;
                    self.matrix_shown.set(self.matrix_kind);
                    self.selected[Tab::Matrix.index()] = 0;
                } else {
                    self.tab = Tab::Matrix;
                }
                Action::Redraw
            }
            KeyCode::Char('>') | KeyCode::Char('l') if self.tab == Tab::Matrix => {
                // Clamped to the columns there are when drawn.
                self.matrix_col = self.matrix_col.saturating_add(1);
                Action::Redraw
            }
            KeyCode::Char('<') | KeyCode::Char('h') if self.tab == Tab::Matrix => {
                self.matrix_col = self.matrix_col.saturating_sub(1);
                Action::Redraw
            }
            KeyCode::Char('r') => {
                self.matrix_rate = !self.matrix_rate;
                Action::Redraw
            }
            KeyCode::Char('s') => {
                self.sort[t].column = self.next_sort_column(self.sort[t].column);
                Action::Redraw
            }
            KeyCode::Char('S') => {
                self.sort[t].descending = !self.sort[t].descending;
                Action::Redraw
            }
            KeyCode::Char('j') | KeyCode::Down => self.move_cursor(1),
            KeyCode::Char('k') | KeyCode::Up => self.move_cursor(-1),
            KeyCode::PageDown => self.move_cursor(self.page() as i64),
            KeyCode::PageUp => self.move_cursor(-(self.page() as i64)),
            KeyCode::Char('f') if ctrl => self.move_cursor(self.page() as i64),
            KeyCode::Char('b') if ctrl => self.move_cursor(-(self.page() as i64)),
            KeyCode::Char('g') | KeyCode::Home => {
                self.selected[t] = 0;
                Action::Redraw
            }
            KeyCode::Char('G') | KeyCode::End => {
                self.selected[t] = self.rows_seen[t].get().saturating_sub(1);
                Action::Redraw
            }
            _ => Action::None,
        }
    }

    fn page(&self) -> usize {
        self.page_seen[self.tab.index()].get().max(1)
    }

    fn set_window(&mut self, w: Window) -> Action {
        if w == self.window {
            return Action::None;
        }
        self.window = w;
        Action::SetWindow(w)
    }

    fn move_cursor(&mut self, d: i64) -> Action {
        let t = self.tab.index();
        let last = self.rows_seen[t].get().saturating_sub(1) as i64;
        let cur = (self.selected[t] as i64).min(last);
        let next = (cur + d).clamp(0, last.max(0)) as usize;
        if next == self.selected[t] {
            return Action::None;
        }
        self.selected[t] = next;
        Action::Redraw
    }

    fn filter_key(&mut self, key: KeyEvent, ctrl: bool) -> Action {
        match key.code {
            KeyCode::Enter => {
                self.filter_editing = false;
                self.filter = self.filter.trim().to_string();
            }
            KeyCode::Esc => {
                self.filter_editing = false;
                self.filter = std::mem::take(&mut self.filter_before_edit);
            }
            KeyCode::Backspace => {
                self.filter.pop();
            }
            KeyCode::Char('u') if ctrl => self.filter.clear(),
            KeyCode::Char('w') if ctrl => {
                let keep = self
                    .filter
                    .trim_end()
                    .rfind(' ')
                    .map(|i| i + 1)
                    .unwrap_or(0);
                self.filter.truncate(keep);
            }
            KeyCode::Char(c) if !ctrl => self.filter.push(c),
            _ => return Action::None,
        }
        self.selected[self.tab.index()] = 0;
        Action::Redraw
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(c: KeyCode) -> KeyEvent {
        KeyEvent::new(c, KeyModifiers::NONE)
    }

    fn ch(c: char) -> KeyEvent {
        key(KeyCode::Char(c))
    }

    fn typed(app: &mut App, s: &str) {
        for c in s.chars() {
            app.handle_key(ch(c));
        }
    }

    #[test]
    fn quit_keys() {
        let mut app = App::default();
        assert_eq!(app.handle_key(ch('q')), Action::Quit);
        assert_eq!(
            app.handle_key(KeyEvent::new(KeyCode::Char('c'), KeyModifiers::CONTROL)),
            Action::Interrupt,
            "Ctrl-C is the driver's to interpret (forwarded to a launched program)"
        );
    }

    #[test]
    fn theme_key_says_which_theme_is_on() {
        let mut app = App::default();
        app.handle_key(ch('t'));
        assert_eq!(
            app.flash.as_deref(),
            Some("theme light (t: next of dark, light, mono)")
        );
        app.handle_key(ch('2'));
        assert_eq!(app.flash, None, "the next key takes the answer away");
    }

    #[test]
    fn sort_cycles_through_the_columns_on_screen() {
        let mut app = App::default();
        app.handle_key(ch('2'));
        // Before any draw: the next column.
        let c0 = app.sort[1].column;
        app.handle_key(ch('s'));
        assert_eq!(app.sort[1].column, c0 + 1);
        // Columns 0, 3, 8 and 9 on screen: from 9 wraps to 0, then 3, then 8.
        app.seen_columns(&[0, 3, 8, 9]);
        app.sort[1].column = 9;
        app.handle_key(ch('s'));
        assert_eq!(app.sort[1].column, 0);
        app.handle_key(ch('s'));
        assert_eq!(app.sort[1].column, 3);
        app.handle_key(ch('s'));
        assert_eq!(app.sort[1].column, 8);
        // From a column that is not on screen: the next one that is.
        app.sort[1].column = 5;
        app.handle_key(ch('s'));
        assert_eq!(app.sort[1].column, 8);
    }

    #[test]
    fn tabs() {
        let mut app = App::default();
        assert_eq!(app.handle_key(ch('2')), Action::Redraw);
        assert_eq!(app.tab, Tab::Qps);
        app.handle_key(ch('5'));
        assert_eq!(app.tab, Tab::Matrix);
        app.handle_key(key(KeyCode::Tab));
        assert_eq!(app.tab, Tab::Doorbells);
        app.handle_key(key(KeyCode::Tab));
        assert_eq!(app.tab, Tab::Collectives);
        app.handle_key(key(KeyCode::Tab));
        assert_eq!(app.tab, Tab::Overview);
        app.handle_key(key(KeyCode::BackTab));
        assert_eq!(app.tab, Tab::Collectives);
        app.handle_key(ch('1'));
        app.handle_key(ch('d'));
        assert_eq!(app.tab, Tab::Doorbells);
        app.handle_key(ch('c'));
        assert_eq!(app.tab, Tab::Collectives);
    }

    #[test]
    fn filter_editing_and_escape() {
        let mut app = App::default();
        app.handle_key(ch('/'));
        assert!(app.filter_editing);
        typed(&mut app, "rank=3 q");
        assert_eq!(app.filter, "rank=3 q", "q is text while editing");
        app.handle_key(key(KeyCode::Backspace));
        app.handle_key(key(KeyCode::Backspace));
        assert_eq!(app.handle_key(key(KeyCode::Enter)), Action::Redraw);
        assert!(!app.filter_editing);
        assert_eq!(app.filter, "rank=3");
        // Esc while editing restores the filter as it was.
        app.handle_key(ch('/'));
        typed(&mut app, " host=x");
        app.handle_key(key(KeyCode::Esc));
        assert_eq!(app.filter, "rank=3");
        // Esc outside the prompt clears the filter.
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::Redraw);
        assert_eq!(app.filter, "");
        assert_eq!(app.handle_key(key(KeyCode::Esc)), Action::None);
        // Ctrl-U clears the line.
        app.handle_key(ch('/'));
        typed(&mut app, "abc");
        app.handle_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
        assert_eq!(app.filter, "");
    }

    #[test]
    fn help_overlay_swallows_keys() {
        let mut app = App::default();
        app.handle_key(ch('?'));
        assert!(app.help);
        assert_eq!(app.handle_key(ch('2')), Action::None);
        assert_eq!(app.tab, Tab::Overview);
        app.handle_key(key(KeyCode::Esc));
        assert!(!app.help);
    }

    #[test]
    fn pause_window_history() {
        let mut app = App::default();
        assert_eq!(app.handle_key(ch(' ')), Action::TogglePause(true));
        assert!(app.paused);
        assert_eq!(app.handle_key(ch(' ')), Action::TogglePause(false));
        assert_eq!(app.window, Window::S10);
        assert_eq!(
            app.handle_key(key(KeyCode::Right)),
            Action::SetWindow(Window::S60)
        );
        assert_eq!(
            app.handle_key(key(KeyCode::Right)),
            Action::SetWindow(Window::All)
        );
        assert_eq!(app.handle_key(key(KeyCode::Right)), Action::None);
        assert_eq!(app.handle_key(ch('w')), Action::SetWindow(Window::S1));
        assert_eq!(app.handle_key(key(KeyCode::Left)), Action::None);
        assert_eq!(app.handle_key(ch('[')), Action::StepHistory(-1));
        assert_eq!(app.handle_key(ch(']')), Action::StepHistory(1));
        assert_eq!(app.handle_key(ch('+')), Action::ChangeSpeed(1));
    }

    #[test]
    fn units_theme_matrix_sort() {
        let mut app = App::default();
        app.handle_key(ch('u'));
        assert_eq!(app.units, Units::Bits);
        app.handle_key(ch('u'));
        assert_eq!(app.units, Units::Bytes);
        assert_eq!(app.theme.name, "dark");
        app.handle_key(ch('t'));
        assert_eq!(app.theme.name, "light");
        app.handle_key(ch('t'));
        assert_eq!(app.theme.name, "mono");
        app.handle_key(ch('t'));
        assert_eq!(app.theme.name, "dark");
        app.handle_key(ch('m'));
        assert_eq!(app.tab, Tab::Matrix);
        assert_eq!(app.matrix_kind, MatrixKind::Node);
        app.handle_key(ch('m'));
        assert_eq!(app.matrix_kind, MatrixKind::Rank);
        app.handle_key(ch('m'));
        assert_eq!(app.matrix_kind, MatrixKind::Gpu);
        app.handle_key(ch('r'));
        assert!(app.matrix_rate);
        app.handle_key(ch('2'));
        let before = app.sort[1];
        app.handle_key(ch('s'));
        assert_eq!(app.sort[1].column, before.column + 1, "no table drawn yet");
        app.handle_key(ch('S'));
        assert_eq!(app.sort[1].descending, !before.descending);
    }

    #[test]
    fn matrix_kind_follows_the_data_until_picked() {
        let mut app = App::default();
        app.handle_key(ch('5'));
        // One node, four ranks: the rank matrix; several nodes: the node matrix.
        assert_eq!(app.matrix_kind_for(1, 4, 0), MatrixKind::Rank);
        assert_eq!(app.matrix_kind_for(3, 4, 0), MatrixKind::Node);
        assert_eq!(app.matrix_kind_for(1, 1, 0), MatrixKind::Node);
        // One node, no ranks, GPU rows (a GPU-initiated run): the GPU matrix.
        assert_eq!(app.matrix_kind_for(1, 0, 2), MatrixKind::Gpu);
        assert_eq!(app.matrix_kind_for(2, 0, 2), MatrixKind::Node);
        // `m` moves on from what was shown: rank → GPU, and the choice then sticks.
        assert_eq!(app.matrix_kind_for(1, 4, 0), MatrixKind::Rank);
        app.handle_key(ch('m'));
        assert_eq!(app.matrix_kind, MatrixKind::Gpu);
        assert_eq!(app.matrix_kind_for(1, 4, 0), MatrixKind::Gpu);
        app.handle_key(ch('m'));
        assert_eq!(app.matrix_kind_for(1, 4, 0), MatrixKind::Node);
        app.handle_key(ch('m'));
        assert_eq!(app.matrix_kind_for(1, 4, 0), MatrixKind::Rank);
    }

    #[test]
    fn cursor_is_clamped_to_rows_seen() {
        let mut app = App::default();
        app.seen(5, 3);
        assert_eq!(app.handle_key(ch('k')), Action::None);
        app.handle_key(ch('j'));
        app.handle_key(key(KeyCode::Down));
        assert_eq!(app.selected[0], 2);
        app.handle_key(key(KeyCode::PageDown));
        assert_eq!(app.selected[0], 4);
        assert_eq!(app.handle_key(ch('j')), Action::None);
        app.handle_key(ch('g'));
        assert_eq!(app.selected[0], 0);
        app.handle_key(ch('G'));
        assert_eq!(app.selected[0], 4);
        app.handle_key(key(KeyCode::PageUp));
        assert_eq!(app.selected[0], 1);
    }

    #[test]
    fn key_release_is_ignored() {
        let mut app = App::default();
        let mut k = ch('q');
        k.kind = KeyEventKind::Release;
        assert_eq!(app.handle_key(k), Action::None);
    }
}
