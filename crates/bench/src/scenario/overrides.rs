//! `--override KEY=VALUE`: one field set on top of the scenario and the
//! flags, in GuideLLM's two-argument spelling too.

use guidebench_core::options::parse_kind_args;
use serde_json::Value;

use crate::session::{DEFAULT_DATA, DEFAULT_PROFILE, PlanArgs, merge_options};
use crate::{Error, Result};

/// Sets `path=value` (a dotted path, a `;` list for several values) in a
/// `kind=…` argument, returned as its JSON form.
fn set_in_kind_arg(arg: &str, path: &str, value: &str) -> Result<String, guidebench_core::Error> {
    let mut args = parse_kind_args(arg)?;
    if path == "kind" {
        args.kind = value.trim().to_owned();
    } else {
        let one = parse_kind_args(&format!("kind=_,{path}={value}"))?;
        merge_options(&mut args.options, one.options);
    }
    let mut object = args.options;
    object.insert("kind".into(), Value::String(args.kind));
    Ok(Value::Object(object).to_string())
}

/// The roots an `--override` path may start with.
const OVERRIDE_ROOTS: &str = "profile.KEY, backend.KEY, data.KEY (data.N.KEY or data[N].KEY \
     with several sources), constraint.KIND.KEY (or constraints[N].KEY), slo.KEY, warmup, \
     cooldown, seed, grace_period, tokenizer";

/// GuideLLM's two-argument `--override KEY VALUES` as guidebench's
/// `KEY=VALUE`: GuideLLM's comma-separated values (one per benchmark:
/// `--override profile.streams 1,2,4`) become a `;` list, which runs one
/// benchmark per value in the same way; a JSON value is kept as it is.
pub fn override_from_pair(key: &str, value: &str) -> String {
    let value = value.trim();
    if value.starts_with(['[', '{', '"']) {
        format!("{key}={value}")
    } else {
        format!("{key}={}", value.replace(',', ";"))
    }
}

/// A GuideLLM path's indexed root (`constraints[0].seconds`,
/// `data[1].prompt_tokens`) as its root, index and rest.
fn indexed_root(path: &str) -> Option<(&str, usize, &str)> {
    let (head, rest) = path.split_once('.')?;
    let (root, index) = head.strip_suffix(']')?.split_once('[')?;
    Some((root, index.trim().parse().ok()?, rest))
}

/// Applies every `--override KEY=VALUE`, in order, on top of the scenario
/// and the flags: `profile.streams=1;2;4`, `constraint.max_requests.count=50`,
/// `backend.sampling.temperature=0.7`, `warmup=10%`.
///
/// # Errors
///
/// A malformed override ([`Error::OverrideSyntax`]), or a path that names
/// nothing ([`Error::Override`], naming the path).
pub fn apply_overrides(plan: &mut PlanArgs, overrides: &[String]) -> Result<()> {
    for item in overrides {
        let (path, value) = item
            .split_once('=')
            .ok_or_else(|| Error::OverrideSyntax(item.clone()))?;
        let path = path.trim();
        let fails = |reason: String| Error::Override {
            path: path.to_owned(),
            reason,
        };
        let unknown = || {
            fails(format!(
                "unknown path; it starts with one of {OVERRIDE_ROOTS}"
            ))
        };
        let context = |e: guidebench_core::Error| fails(e.to_string());
        // GuideLLM's indexed paths: `constraints[N].KEY`, `data[N].KEY`.
        let indexed = indexed_root(path);
        if let Some(("constraint" | "constraints", index, key)) = indexed {
            let Some(constraint) = plan.constraints.get_mut(index) else {
                return Err(fails(format!(
                    "there is no constraint {index} (there are {})",
                    plan.constraints.len()
                )));
            };
            *constraint = set_in_kind_arg(constraint, key, value).map_err(context)?;
            continue;
        }
        let data_path;
        let path = match indexed {
            Some(("data", index, key)) => {
                data_path = format!("data.{index}.{key}");
                data_path.as_str()
            }
            _ => path,
        };
        let (root, rest) = path.split_once('.').unwrap_or((path, ""));
        match (root, rest) {
            ("profile", rest) if !rest.is_empty() => {
                let current = plan.profile.as_deref().unwrap_or(DEFAULT_PROFILE);
                plan.profile = Some(set_in_kind_arg(current, rest, value).map_err(context)?);
            }
            ("backend", "kind") => plan.backend.args.kind = value.trim().to_owned(),
            ("backend", rest) if !rest.is_empty() => {
                // The value as one option of the parsed backend: a
                // `sampling.*` field goes to the run's sampling.
                let one = parse_kind_args(&format!("kind=_,{rest}={value}")).map_err(context)?;
                plan.backend.merge(one.options)?;
            }
            ("data", rest) if !rest.is_empty() => {
                if plan.data.is_empty() {
                    plan.data.push(DEFAULT_DATA.to_owned());
                }
                let (index, key) = match rest.split_once('.') {
                    Some((n, key)) if n.parse::<usize>().is_ok() => {
                        (n.parse::<usize>().unwrap_or_default(), key)
                    }
                    _ if plan.data.len() == 1 => (0, rest),
                    _ => {
                        return Err(fails(format!(
                            "there are {} data sources; name one as data.N.KEY",
                            plan.data.len()
                        )));
                    }
                };
                let Some(source) = plan.data.get_mut(index) else {
                    return Err(fails(format!(
                        "there is no data source {index} (there are {})",
                        plan.data.len()
                    )));
                };
                *source = set_in_kind_arg(source, key, value).map_err(context)?;
            }
            ("constraint" | "constraints", rest) => {
                let Some((kind, key)) = rest.split_once('.') else {
                    return Err(unknown());
                };
                let found = plan
                    .constraints
                    .iter()
                    .position(|c| parse_kind_args(c).is_ok_and(|args| args.kind == kind));
                let index = found.unwrap_or_else(|| {
                    plan.constraints.push(format!("kind={kind}"));
                    plan.constraints.len() - 1
                });
                plan.constraints[index] =
                    set_in_kind_arg(&plan.constraints[index], key, value).map_err(context)?;
            }
            ("slo", key) if !key.is_empty() && !key.contains('.') => {
                let mut pairs: Vec<String> = plan
                    .slo
                    .iter()
                    .flat_map(|s| s.split(','))
                    .filter(|p| p.split_once('=').is_none_or(|(k, _)| k.trim() != key))
                    .map(str::to_owned)
                    .collect();
                pairs.push(format!("{key}={value}"));
                plan.slo = Some(pairs.join(","));
            }
            ("warmup", "") => plan.warmup = Some(value.to_owned()),
            ("cooldown", "") => plan.cooldown = Some(value.to_owned()),
            ("grace_period", "") => plan.grace_period = Some(value.to_owned()),
            ("tokenizer", "") => plan.tokenizer = Some(value.into()),
            ("seed", "") => {
                plan.seed = Some(
                    value
                        .trim()
                        .parse()
                        .map_err(|_| fails(format!("expected a whole number, got `{value}`")))?,
                );
            }
            _ => return Err(unknown()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::BackendArgs;

    fn plan() -> PlanArgs {
        PlanArgs {
            backend: BackendArgs::parse("kind=offline,engine=mock").expect("parses"),
            profile: Some("kind=concurrent,streams=8".into()),
            constraints: vec!["kind=max_requests,count=10".into()],
            ..PlanArgs::default()
        }
    }

    fn args(kind_arg: &str) -> serde_json::Map<String, Value> {
        let mut args = parse_kind_args(kind_arg).expect("parses");
        args.options.insert("kind".into(), Value::String(args.kind));
        args.options
    }

    #[test]
    fn overrides_set_profile_constraint_backend_and_scalar_fields() {
        let mut p = plan();
        apply_overrides(
            &mut p,
            &[
                "profile.streams=1;2;4".into(),
                "constraint.max_requests.count=50".into(),
                "constraint.max_duration.seconds=30s".into(),
                "backend.sampling.temperature=0.5".into(),
                "data.prompt_tokens=64".into(),
                "warmup=10%".into(),
                "seed=9".into(),
                "slo.ttft=200ms".into(),
            ],
        )
        .expect("valid");
        let profile = args(p.profile.as_deref().expect("set"));
        assert_eq!(profile["streams"], serde_json::json!([1, 2, 4]));
        assert_eq!(profile["kind"], "concurrent");
        assert_eq!(args(&p.constraints[0])["count"], 50);
        assert_eq!(args(&p.constraints[1])["kind"], "max_duration");
        assert_eq!(p.backend.sampling.temperature, Some(0.5));
        assert_eq!(args(&p.data[0])["prompt_tokens"], 64);
        assert_eq!(args(&p.data[0])["kind"], "synthetic_text");
        assert_eq!(
            (p.warmup.as_deref(), p.seed, p.slo.as_deref()),
            (Some("10%"), Some(9), Some("ttft=200ms"))
        );
    }

    #[test]
    fn guidellm_two_argument_overrides_and_indexed_paths_apply() {
        assert_eq!(
            override_from_pair("profile.streams", "1,2,4"),
            "profile.streams=1;2;4"
        );
        assert_eq!(
            override_from_pair("profile.rate", "[1, 2]"),
            "profile.rate=[1, 2]"
        );
        let mut p = plan();
        p.data = vec!["kind=synthetic_text,prompt_tokens=8,output_tokens=2".into()];
        apply_overrides(
            &mut p,
            &[
                override_from_pair("profile.streams", "1,2,4"),
                override_from_pair("constraints[0].count", "5,6,7"),
                override_from_pair("data[0].prompt_tokens", "16"),
            ],
        )
        .expect("valid");
        let profile = args(p.profile.as_deref().expect("set"));
        assert_eq!(profile["streams"], serde_json::json!([1, 2, 4]));
        assert_eq!(
            args(&p.constraints[0])["count"],
            serde_json::json!([5, 6, 7])
        );
        assert_eq!(args(&p.data[0])["prompt_tokens"], 16);
        let err = apply_overrides(&mut plan(), &["constraints[3].count=1".into()])
            .expect_err("no such constraint");
        assert!(err.to_string().contains("no constraint 3"), "{err}");
    }

    #[test]
    fn an_override_with_an_unknown_path_is_named_in_the_error() {
        for bad in [
            "colour=blue",
            "profile=x",
            "constraint.max_requests=5",
            "warmup.x=1",
        ] {
            let err = apply_overrides(&mut plan(), &[bad.into()]).expect_err(bad);
            let path = bad.split_once('=').map_or(bad, |(p, _)| p);
            assert!(err.to_string().contains(&format!("`{path}`")), "{err}");
        }
        let err = apply_overrides(&mut plan(), &["profile.streams".into()]).expect_err("no =");
        assert!(err.to_string().contains("KEY=VALUE"), "{err}");
    }
}
