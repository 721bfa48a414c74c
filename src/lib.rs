//! sigmatop core: the event schema, wire protocol, record format, decoders and aggregation shared by
//! the preload library, the command-line tool and the exporters.

pub mod decode;
pub mod event;
#[doc(hidden)]
pub mod harness_io;
pub mod trace;
pub mod wire;

#[cfg(feature = "cli")]
pub mod agg;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "cli")]
pub mod correlate;
#[cfg(feature = "cli")]
pub mod export;
#[cfg(feature = "cli")]
pub mod live;
#[cfg(feature = "cli")]
pub mod view;
