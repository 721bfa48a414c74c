//! sigmatop's dashboard: a [`ViewModel`] in, ratatui frames out. Presentation only: no sockets, no
//! files except theme files, no dependency on the core crate.
//!
//! The driver (in the core) owns the terminal and the data:
//!
//! 1. build an [`App`] with a theme from [`Theme::from_env`] (`--theme`, `NO_COLOR`);
//! 2. on each sample, fill a [`ViewModel`] (keep the old one while [`App::paused`]);
//! 3. call [`draw`] inside `terminal.draw(|f| draw(f, &app, &vm))`;
//! 4. feed each key to [`App::handle_key`] and act on the returned [`Action`]
//!    (window change, history step, pause, replay speed, quit).
//!
//! [`warnings::compute`] gives the live warnings for other outputs (e.g. a headless report). With
//! the feature `testing`, `sample_view_model` gives a fixed, realistic feed for tests, fuzz targets
//! and benchmarks.
//!
//! Modules:
//! - `model`: the view model, the one input of every frame
//! - `app`: UI state and key bindings (tab, sort, filter, window, units, theme)
//! - `filter`: the `/` filter's language and which rows it keeps
//! - `draw`: one frame: header, tab bar, the current view, status and key lines, help
//! - `views`: one file per view (overview, qps, gpus, nodes, matrix, doorbells, help)
//! - `widgets`: what the frame and the views are drawn with (table, section, sparkline, bar,
//!   text, header and footer lines)
//! - [`warnings`]: the live warning rules over a view model
//! - [`units`]: numbers as sigmatop prints them, shared with the CLI's tables (rates, volumes,
//!   byte totals, counts, durations)
//! - `theme`: colour themes (built in, from files, `NO_COLOR`)
//! - `fixture`: a fixed view model for tests (feature `testing`)
//! - `harness`: the fuzz entry point for the theme parser (feature `testing`)

#![forbid(unsafe_code)]

mod app;
mod draw;
#[cfg(any(test, feature = "testing"))]
mod fixture;
#[cfg(feature = "testing")]
#[doc(hidden)]
pub mod harness;
mod model;
mod query;
mod theme;
pub mod units;
mod views;
pub mod warnings;
mod widgets;

pub use draw::draw;
#[cfg(any(test, feature = "testing"))]
pub use fixture::sample_view_model;

pub use app::{Action, App, MatrixKind, Sort, Tab, Window};
pub use model::{
    CollArrivals, CollRankRow, CollRow, CollectivesModel, DoorbellModel, DoorbellRecord,
    DoorbellSeries, EndpointRow, GpuRow, Header, Matrices, Matrix, NodeRow, Peer, Percentiles,
    ProcessRow, QueueRow, RankRow, StatusCounters, ViewModel,
};
pub use query::Query;
pub use theme::{BUILTIN as BUILTIN_THEMES, Theme, ThemeError};
pub use units::Units;
pub use warnings::{Warning, WarningConfig, WarningKind};
