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
//! [`warnings::compute`] gives the live warnings for other outputs (e.g. a headless report), and
//! [`sample_view_model`] a fixed, realistic feed for smoke tests.

#![forbid(unsafe_code)]

mod app;
mod draw;
mod filter;
mod fixture;
pub mod fmt;
#[doc(hidden)]
pub mod harness;
mod model;
mod theme;
mod views;
pub mod warnings;

pub use draw::draw;
pub use fixture::sample_view_model;

pub use app::{Action, App, MatrixKind, Sort, Tab, Window};
pub use filter::Filter;
pub use fmt::Units;
pub use model::{
    DoorbellModel, DoorbellRecord, DoorbellSeries, EndpointRow, GpuRow, Header, Matrices, Matrix,
    NodeRow, Peer, Percentiles, ProcessRow, RankRow, StatusCounters, ViewModel,
};
pub use theme::{BUILTIN as BUILTIN_THEMES, Theme, ThemeError};
pub use warnings::{Warning, WarningConfig, WarningKind};
