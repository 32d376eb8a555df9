//! Registrations by unique name: the [`Named`] trait and the sorted
//! [`Registry`] built once from `inventory`, shared by the engine and
//! backend registry ([`crate::registry`]) and the built-in models
//! ([`crate::model::BuiltinModel`]).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use crate::{Error, Result};

/// Something with a unique name.
pub trait Named {
    /// The unique name.
    fn name(&self) -> &'static str;

    /// The cargo feature this binary lacks for it, when it is only a
    /// stand-in that says so; `None` for what is compiled in.
    fn missing_feature(&self) -> Option<&'static str> {
        None
    }
}

/// Registrations of one kind, sorted by name.
#[derive(Debug)]
pub struct Registry<T: 'static> {
    what: &'static str,
    entries: BTreeMap<&'static str, &'static T>,
}

impl<T: Named + 'static> Registry<T> {
    /// Builds the map; a duplicate name is an error.
    pub fn build(
        what: &'static str,
        entries: impl IntoIterator<Item = &'static T>,
    ) -> Result<Self> {
        let mut map = BTreeMap::new();
        for entry in entries {
            if map.insert(entry.name(), entry).is_some() {
                return Err(Error::DuplicateName {
                    what,
                    name: entry.name().to_owned(),
                });
            }
        }
        Ok(Registry { what, entries: map })
    }

    /// Looks up a name; an unknown name lists the registered ones (see
    /// [`listed`](Self::listed)).
    pub fn get(&self, name: &str) -> Result<&'static T> {
        self.entries
            .get(name)
            .copied()
            .ok_or_else(|| Error::UnknownName {
                what: self.what,
                name: name.to_owned(),
                available: self.listed(),
            })
    }

    /// Registered names, sorted, stand-ins for what is not compiled in
    /// included.
    pub fn names(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.entries.keys().copied()
    }

    /// The names to offer a user, sorted: those compiled in, then each
    /// stand-in as `NAME (not compiled in; build with --features F)`, so
    /// that no list shows an engine this binary lacks as available.
    pub fn listed(&self) -> Vec<String> {
        let (present, absent): (Vec<&T>, Vec<&T>) = self
            .entries
            .values()
            .partition(|entry| entry.missing_feature().is_none());
        present
            .into_iter()
            .map(|entry| entry.name().to_owned())
            .chain(absent.into_iter().map(|entry| {
                format!(
                    "{} (not compiled in; build with --features {})",
                    entry.name(),
                    entry.missing_feature().unwrap_or(entry.name())
                )
            }))
            .collect()
    }

    /// Registrations, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = &'static T> + '_ {
        self.entries.values().copied()
    }
}

pub(crate) fn cached<T: Named + inventory::Collect>(
    cell: &'static OnceLock<std::result::Result<Registry<T>, (String, &'static str)>>,
    what: &'static str,
) -> Result<&'static Registry<T>> {
    cell.get_or_init(|| {
        Registry::build(what, inventory::iter::<T>()).map_err(|e| match e {
            Error::DuplicateName { name, what } => (name, what),
            other => (other.to_string(), what),
        })
    })
    .as_ref()
    .map_err(|(name, what)| Error::DuplicateName {
        what,
        name: name.clone(),
    })
}
