//! sigmatop dashboard (placeholder until the dashboard lands).
