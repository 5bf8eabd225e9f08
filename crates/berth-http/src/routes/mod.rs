//! The route table: one module per resource.

pub mod domains;
pub mod instances;
pub mod exec;
