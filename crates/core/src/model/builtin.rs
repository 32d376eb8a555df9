//! Built-in models (`model=builtin:NAME`): model folders that a crate can
//! make on the spot, registered with
//! [`register_builtin_model!`](crate::register_builtin_model) and found by
//! [`resolve`](super::resolve).

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::Result;
use crate::named::{Named, Registry, cached};

/// A built-in model's registration: a model folder that an engine crate
/// can make on the spot (generated weights), named by
/// `model=builtin:NAME` (see [`resolve`](super::resolve)).
#[derive(Debug)]
pub struct BuiltinModel {
    /// The unique name (`builtin:NAME`).
    pub name: &'static str,
    /// One line describing the model.
    pub description: &'static str,
    /// Returns the model's folder, making it first if it is not there yet.
    /// The argument is guidebench's cache root
    /// ([`cache_root`](super::cache_root) unless a caller
    /// chose another); the folder should live under it, and be written so
    /// that a crash or a concurrent process never leaves half a model.
    pub create: fn(&Path) -> Result<PathBuf>,
}

inventory::collect!(BuiltinModel);

impl Named for BuiltinModel {
    fn name(&self) -> &'static str {
        self.name
    }
}

/// Every registered built-in model, built once.
pub fn builtin_models() -> Result<&'static Registry<BuiltinModel>> {
    static CELL: OnceLock<std::result::Result<Registry<BuiltinModel>, (String, &'static str)>> =
        OnceLock::new();
    cached(&CELL, "builtin model")
}
