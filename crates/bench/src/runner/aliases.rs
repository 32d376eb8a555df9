//! GuideLLM 0.8.1's names for profile and constraint options: one table,
//! read by `--profile` and `--constraint` ([`super::Profile::from_args`],
//! [`super::ConstraintPlan::from_args`]) and by the GuideLLM scenario
//! translator, so that a command line and a scenario file agree.
//!
//! A profile's `warmup` and `cooldown` (where GuideLLM gives them) are
//! taken out before, by [`super::Phase::take_from_profile`].
//!
//! A GuideLLM name is accepted where its meaning is guidebench's
//! ([`Ours::Rename`]), accepted only with the values whose behaviour
//! guidebench has anyway ([`Ours::Implied`]), or refused with what to write
//! instead ([`Ours::Refused`]); never dropped silently.

use guidebench_core::{Error, Result};
use serde_json::{Map, Value};

/// What an option belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// `--profile`.
    Profile,
    /// `--constraint`.
    Constraint,
}

impl Component {
    /// The word errors name the component with (`profile sweep`).
    fn word(self) -> &'static str {
        match self {
            Component::Profile => "profile",
            Component::Constraint => "constraint",
        }
    }
}

/// What guidebench makes of a GuideLLM option name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ours {
    /// The same option, under this name.
    Rename(&'static str),
    /// Accepted with one of these values, which guidebench does anyway, and
    /// then dropped; any other value is refused with the text given.
    Implied {
        /// The values accepted.
        values: &'static [&'static str],
        /// Why another value is refused, and what to write instead.
        otherwise: &'static str,
    },
    /// Refused: why, and what to write instead.
    Refused(&'static str),
}

/// One GuideLLM option name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Alias {
    /// What the option belongs to.
    pub component: Component,
    /// The kinds it applies to; empty: every kind.
    pub kinds: &'static [&'static str],
    /// GuideLLM's name.
    pub guidellm: &'static str,
    /// What guidebench makes of it.
    pub ours: Ours,
}

const fn alias(
    component: Component,
    kinds: &'static [&'static str],
    guidellm: &'static str,
    ours: Ours,
) -> Alias {
    Alias {
        component,
        kinds,
        guidellm,
        ours,
    }
}

/// Every GuideLLM option name that differs from guidebench's. Where a name
/// appears twice, the first entry whose kinds match applies.
pub const ALIASES: &[Alias] = &[
    // Profiles.
    alias(
        Component::Profile,
        &["async", "concurrent", "constant", "sweep", "throughput"],
        "rampup_duration",
        Ours::Rename("rampup"),
    ),
    alias(
        Component::Profile,
        &["async", "sweep"],
        "strategy_type",
        Ours::Rename("strategy"),
    ),
    alias(
        Component::Profile,
        &["async", "poisson", "sweep"],
        "random_seed",
        Ours::Rename("seed"),
    ),
    alias(
        Component::Profile,
        &["goodput"],
        "target_attainment",
        Ours::Rename("target"),
    ),
    alias(
        Component::Profile,
        &["knee"],
        "initial_streams",
        Ours::Rename("streams"),
    ),
    alias(
        Component::Profile,
        &["knee"],
        "adaptive",
        Ours::Rename("refine"),
    ),
    alias(
        Component::Profile,
        &["replay"],
        "schedule_turn",
        Ours::Refused(
            "guidebench's replay schedules requests by their trace offsets times time_scale \
             and has no choice of turn scheduling; leave schedule_turn out",
        ),
    ),
    // Constraints.
    alias(
        Component::Constraint,
        &["max_global_error_rate"],
        "stopping_scope",
        Ours::Implied {
            values: &["current", "all"],
            otherwise: "max_global_error_rate always stops the run once the rate is exceeded",
        },
    ),
    alias(
        Component::Constraint,
        &[],
        "stopping_scope",
        Ours::Implied {
            values: &["current"],
            otherwise: "this constraint stops the current benchmark only; to stop the whole \
                        run on errors, add --constraint kind=max_global_error_rate,rate=R",
        },
    ),
    alias(
        Component::Constraint,
        &["max_global_error_rate"],
        "minimum",
        Ours::Rename("min_requests"),
    ),
    alias(
        Component::Constraint,
        &["over_saturation"],
        "min_seconds",
        Ours::Rename("min_duration"),
    ),
    alias(
        Component::Constraint,
        &["over_saturation"],
        "max_window_seconds",
        Ours::Rename("window"),
    ),
    alias(
        Component::Constraint,
        &["over_saturation"],
        "moe_threshold",
        Ours::Refused(OTHER_DETECTOR),
    ),
    alias(
        Component::Constraint,
        &["over_saturation"],
        "minimum_ttft",
        Ours::Refused(OTHER_DETECTOR),
    ),
    alias(
        Component::Constraint,
        &["over_saturation"],
        "maximum_window_ratio",
        Ours::Refused(OTHER_DETECTOR),
    ),
    alias(
        Component::Constraint,
        &["over_saturation"],
        "minimum_window_size",
        Ours::Refused(OTHER_DETECTOR),
    ),
];

/// Why GuideLLM's own over-saturation settings are refused.
const OTHER_DETECTOR: &str = "a setting of GuideLLM's detector, which guidebench's does not \
     have: it tests the slopes of time bins; set window, bin, min_bins, min_duration or \
     confidence instead";

/// Replaces GuideLLM's option names in the `options` of a `kind` of
/// `component` with guidebench's, per [`ALIASES`].
///
/// # Errors
///
/// [`Error::InvalidOption`] naming GuideLLM's key: a name refused, a value
/// an implied option does not take, or a name given together with the
/// guidebench name it stands for.
pub fn apply(component: Component, kind: &str, options: &mut Map<String, Value>) -> Result<()> {
    let context = format!("{} {kind}", component.word());
    for alias in ALIASES {
        if alias.component != component || !(alias.kinds.is_empty() || alias.kinds.contains(&kind))
        {
            continue;
        }
        let Some(value) = options.remove(alias.guidellm) else {
            continue;
        };
        let invalid = |reason: String| Error::InvalidOption {
            context: context.clone(),
            key: alias.guidellm.to_owned(),
            reason,
        };
        match alias.ours {
            Ours::Rename(ours) => {
                if options.contains_key(ours) {
                    return Err(invalid(format!(
                        "is GuideLLM's name for `{ours}`, which is given too: give one of them"
                    )));
                }
                options.insert(ours.to_owned(), value);
            }
            Ours::Implied { values, otherwise } => {
                if !value.as_str().is_some_and(|v| values.contains(&v)) {
                    let list: Vec<String> = values.iter().map(|v| format!("`{v}`")).collect();
                    return Err(invalid(format!(
                        "takes {} here, got {value}: {otherwise}",
                        list.join(" or ")
                    )));
                }
            }
            Ours::Refused(why) => return Err(invalid(format!("is not taken: {why}"))),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn applied(component: Component, kind: &str, options: Value) -> Result<Value> {
        let Value::Object(mut options) = options else {
            panic!("an object");
        };
        apply(component, kind, &mut options)?;
        Ok(Value::Object(options))
    }

    #[test]
    fn guidellm_names_become_guidebench_names_where_the_meaning_is_the_same() {
        assert_eq!(
            applied(
                Component::Profile,
                "sweep",
                json!({"strategy_type": "poisson", "rampup_duration": 5, "sweep_size": 4})
            )
            .expect("renamed"),
            json!({"strategy": "poisson", "rampup": 5, "sweep_size": 4})
        );
        assert_eq!(
            applied(
                Component::Profile,
                "knee",
                json!({"initial_streams": [1, 2, 4, 8, 16], "adaptive": true})
            )
            .expect("renamed"),
            json!({"streams": [1, 2, 4, 8, 16], "refine": true})
        );
        assert_eq!(
            applied(
                Component::Constraint,
                "over_saturation",
                json!({"min_seconds": 10, "max_window_seconds": 60, "stopping_scope": "current"})
            )
            .expect("renamed"),
            json!({"min_duration": 10, "window": 60})
        );
        // A name of another kind is left for that kind's checks to name.
        for (kind, options) in [
            ("concurrent", json!({"adaptive": true})),
            ("synchronous", json!({"rampup_duration": 5})),
            ("concurrent", json!({"random_seed": 5})),
        ] {
            assert_eq!(
                applied(Component::Profile, kind, options.clone()).expect("kept"),
                options
            );
        }
    }

    #[test]
    fn guidellm_names_whose_meaning_differs_are_refused_with_what_to_write() {
        let err = applied(
            Component::Constraint,
            "max_requests",
            json!({"count": 5, "stopping_scope": "all"}),
        )
        .expect_err("refused");
        let message = err.to_string();
        assert!(message.contains("stopping_scope"), "{message}");
        assert!(message.contains("max_global_error_rate"), "{message}");
        assert!(
            applied(
                Component::Constraint,
                "max_global_error_rate",
                json!({"rate": 0.1, "stopping_scope": "all"})
            )
            .is_ok()
        );
        let err = applied(
            Component::Constraint,
            "over_saturation",
            json!({"moe_threshold": 2.0}),
        )
        .expect_err("refused");
        assert!(err.to_string().contains("min_bins"), "{err}");
        let err = applied(
            Component::Profile,
            "goodput",
            json!({"target": 0.9, "target_attainment": 0.95}),
        )
        .expect_err("both");
        assert!(err.to_string().contains("given too"), "{err}");
        let err = applied(
            Component::Profile,
            "replay",
            json!({"schedule_turn": "idle_gap"}),
        )
        .expect_err("refused");
        assert!(err.to_string().contains("leave schedule_turn out"), "{err}");
    }
}
