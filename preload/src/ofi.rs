//! ofi layer (being written).

pub fn hooks() -> Vec<crate::dl::Hook> {
    Vec::new()
}
