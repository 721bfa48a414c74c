//! The pieces the frame and the views are drawn with; they know nothing of which view uses them.
//!
//! - `table`: the sortable table with column priorities that every view's rows go through
//! - `section`: a view's titled separator
//! - `sparkline`: a one-line text sparkline
//! - `bar`: a horizontal bar and the matrix heat shades
//! - `text`: cutting text to a width, left/right lines
//! - `header`: the header and tab bar lines
//! - `footer`: the status, warnings and key lines

pub(crate) mod bar;
pub(crate) mod footer;
pub(crate) mod header;
pub(crate) mod section;
pub(crate) mod sparkline;
pub(crate) mod table;
pub(crate) mod text;
