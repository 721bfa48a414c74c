//! sigmatop core: the event schema, wire protocol, record format, decoders and aggregation shared by
//! the preload library, the command-line tool and the exporters.

pub mod decode;
pub mod event;
#[cfg(feature = "testing")]
pub mod harness_io;
pub mod trace;
pub mod wire;

#[cfg(feature = "analysis")]
pub mod agg;
#[cfg(feature = "cli")]
pub mod cli;
#[cfg(feature = "analysis")]
pub mod correlate;
#[cfg(feature = "analysis")]
pub mod export;
#[cfg(feature = "analysis")]
pub mod live;
