//! The recipe registry: load (built-in and user files), validate, resolve, estimate capacity.

pub mod capacity;
mod error;
#[cfg(test)]
pub(crate) mod fixtures;
pub mod launch;
mod load;
pub mod resolve;
pub mod schema;
pub mod support;
mod validate;
mod values;

pub use error::RecipeError;
pub use load::{Entry, Registry, Source};
