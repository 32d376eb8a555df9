//! The option lists `guidebench backends` prints and the kind names `run
//! --help` gives, made from the registries (backends, engines, data kinds,
//! profiles, constraints, objectives, outputs), so help never lags behind
//! them and every default shown is the one the code applies
//! ([`OptionSpec::default_from`]).

use guidebench_core::options::{OptionSpec, describe_type};
use guidebench_core::registry;

use crate::Result;

/// One part of `guidebench backends`: a title, then each kind's name, one
/// line about it (empty for kinds listed by name only) and its options.
#[derive(Debug, Clone)]
pub struct OptionSection {
    /// The section's heading.
    pub title: &'static str,
    /// Each kind: its name (empty for a section of one unnamed list), its
    /// description (empty for none) and its options.
    pub kinds: Vec<(&'static str, &'static str, &'static [OptionSpec])>,
}

/// Every option list a user can set, in the order `guidebench backends`
/// prints them, then `extra` (the sections of crates this one does not
/// depend on, such as the mock server's).
///
/// # Errors
///
/// The registries failing to load (a name registered twice).
pub fn option_sections(extra: Vec<OptionSection>) -> Result<Vec<OptionSection>> {
    let named = |kinds: &[(&'static str, &'static [OptionSpec])]| {
        kinds
            .iter()
            .map(|(name, options)| (*name, "", *options))
            .collect()
    };
    let mut sections = vec![
        OptionSection {
            title: "Backend kinds (--backend kind=NAME,...):",
            kinds: (registry::backends()?.iter())
                .map(|b| (b.name, b.description, b.options))
                .collect(),
        },
        OptionSection {
            title: "Engines (--backend kind=offline,engine=NAME,...):",
            kinds: (registry::engines()?.iter())
                .map(|e| (e.name, e.description, e.options))
                .collect(),
        },
        OptionSection {
            title: "Sampling (--backend ...,sampling.KEY=VALUE; a data row's own column wins):",
            kinds: vec![("", "", crate::session::SAMPLING_OPTIONS)],
        },
        OptionSection {
            title: "Data (--data kind=NAME,...):",
            kinds: (crate::data::DATA_KINDS.iter())
                .map(|k| match k.alias {
                    Some(_) => (k.name, k.description, &[][..]),
                    None => (k.name, "", k.options),
                })
                .collect(),
        },
        OptionSection {
            title: "Profiles (--profile kind=NAME,...):",
            kinds: named(crate::runner::PROFILE_KINDS),
        },
        OptionSection {
            title: "Constraints (--constraint kind=NAME,...):",
            kinds: named(crate::runner::CONSTRAINT_KINDS),
        },
        OptionSection {
            title: "Objectives (--slo KEY=VALUE,...):",
            kinds: vec![("", "", crate::slo::SLO_OPTIONS)],
        },
        OptionSection {
            title: "Outputs (--output kind=NAME,...):",
            kinds: (crate::outputs::OUTPUT_KINDS.iter())
                .map(|k| (k.name, "", k.options))
                .collect(),
        },
    ];
    sections.extend(extra);
    Ok(sections)
}

/// The sections as `guidebench backends` prints them: a blank line between
/// sections, each kind's name and description, then one line per option
/// (name, type, description, default, whether required).
#[must_use]
pub fn options_text(sections: &[OptionSection]) -> String {
    use std::fmt::Write as _;
    let mut out = String::new();
    for (i, section) in sections.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(out, "{}", section.title);
        for (name, description, options) in &section.kinds {
            match (*name, *description) {
                ("", _) => {}
                (name, "") => {
                    let _ = writeln!(out, "  {name}");
                }
                (name, description) => {
                    let _ = writeln!(out, "  {name:<14} {description}");
                }
            }
            for spec in *options {
                let default = spec
                    .default_text()
                    .map(|d| format!(" (default {d})"))
                    .unwrap_or_default();
                let required = if spec.required { " (required)" } else { "" };
                let _ = writeln!(
                    out,
                    "      {:<22} {:<9} {}{default}{required}",
                    spec.name,
                    describe_type(spec.ty),
                    spec.description,
                );
            }
        }
    }
    out
}

/// The names of the data kinds, profiles and outputs, each list joined
/// with commas, for `run --help`.
#[must_use]
pub fn kind_names() -> (String, String, String) {
    let data: Vec<&str> = crate::data::DATA_KINDS.iter().map(|k| k.name).collect();
    let profiles: Vec<&str> = (crate::runner::PROFILE_KINDS.iter())
        .map(|(name, _)| *name)
        .collect();
    let outputs: Vec<&str> = (crate::outputs::OUTPUT_KINDS.iter())
        .map(|k| k.name)
        .collect();
    (data.join(", "), profiles.join(", "), outputs.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;
    // Link the mock engine, so the engines' section is not empty.
    use guidebench_testkit as _;

    /// A spec that names a typed default (`default_from`) whose struct has
    /// no field of the spec's name would print no default at all: every
    /// such spec, in every list `guidebench backends` prints, resolves.
    #[test]
    fn every_default_help_prints_comes_from_a_field_of_its_typed_struct() {
        let mut checked = 0;
        let Ok(sections) = option_sections(Vec::new()) else {
            panic!("the registries do not load");
        };
        for section in sections {
            for (kind, _, options) in &section.kinds {
                for spec in options.iter().filter(|spec| spec.default.is_some()) {
                    assert!(
                        spec.default_text().is_some(),
                        "{} {kind}: `{}` names {:?}, which has no such field",
                        section.title,
                        spec.name,
                        spec.default,
                    );
                    checked += 1;
                }
            }
        }
        assert!(checked > 50, "only {checked} defaults were checked");
    }

    #[test]
    fn every_section_prints_its_title_and_each_option_with_its_default() {
        let sections = option_sections(Vec::new()).expect("the registries load");
        let text = options_text(&sections);
        for section in &sections {
            assert!(text.contains(section.title), "{}", section.title);
        }
        assert!(text.contains("(default 32)"), "offline batch_size: {text}");
        assert!(text.contains("  throughput\n"), "{text}");
    }
}
