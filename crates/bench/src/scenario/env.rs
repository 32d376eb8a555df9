//! GuideLLM 0.8.1's settings from the environment (`GUIDELLM__…`), each
//! read or refused by name.
//!
//! GuideLLM reads two models from variables named `GUIDELLM__…` (names in
//! any case, `__` between nested names, a complex value as JSON): its
//! `Settings` (logging, scheduler internals, defaults) and its
//! `BenchmarkScenario` (`GUIDELLM__SPEC__…`, `GUIDELLM__METADATA__…`,
//! `GUIDELLM__BENCHMARKS`). [`EnvSettings::read`] takes the variables as
//! (name, value) pairs and returns what guidebench honours:
//!
//! * the scenario variables, built into GuideLLM's nested scenario object
//!   and mapped as a GuideLLM scenario file is ([`super::guidellm`]); they
//!   sit below a scenario file (`-c`), the flags and `--override`
//!   ([`super::Flags::plan`]);
//! * the settings guidebench has a meaning for (the console log level, the
//!   sweep's default size, the folder of the default report files, the
//!   error-rate constraints' defaults);
//! * every other setting refused by name, saying why and what to do
//!   instead, and a name that is no GuideLLM setting refused with the
//!   nearest one. Every bad variable is named, not only the first.

use std::path::PathBuf;

use guidebench_core::options::parse_kind_args;
use serde_json::{Map, Value};

use super::column_mapper::{ColumnMappings, scenario_mapper};
use super::file::Scenario;
use super::guidellm;
use crate::session::PlanArgs;
use crate::{Error, Result};

/// The prefix of GuideLLM's environment settings.
pub const PREFIX: &str = "GUIDELLM__";

/// The console log level's variable.
pub const CONSOLE_LOG_LEVEL: &str = "GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL";

/// Whether a variable is one of GuideLLM's settings by its prefix
/// (`GUIDELLM__`, in any case, as GuideLLM reads names).
#[must_use]
pub fn is_guidellm_var(name: &str) -> bool {
    name.get(..PREFIX.len())
        .is_some_and(|prefix| prefix.eq_ignore_ascii_case(PREFIX))
}

/// The `tracing` filter for GuideLLM's console log level (loguru's:
/// `TRACE`, `DEBUG`, `INFO`, `SUCCESS`, `WARNING`, `ERROR`, `CRITICAL`,
/// in any case; empty turns console logging off, as in GuideLLM), or
/// `None` for a level loguru does not have.
#[must_use]
pub fn log_filter(level: &str) -> Option<&'static str> {
    Some(match level.trim().to_ascii_uppercase().as_str() {
        "" => "off",
        "TRACE" => "trace",
        "DEBUG" => "debug",
        // SUCCESS sits between INFO and WARNING: tracing has nothing between.
        "INFO" | "SUCCESS" => "info",
        "WARNING" => "warn",
        "ERROR" | "CRITICAL" => "error",
        _ => return None,
    })
}

/// The console log level set by [`CONSOLE_LOG_LEVEL`] among `vars`, as a
/// `tracing` filter ([`log_filter`]); `None` when it is not set or is no
/// level (which [`EnvSettings::read`] refuses).
pub fn console_log_filter<I, K, V>(vars: I) -> Option<&'static str>
where
    I: IntoIterator<Item = (K, V)>,
    K: AsRef<str>,
    V: AsRef<str>,
{
    vars.into_iter()
        .filter(|(name, _)| name.as_ref().eq_ignore_ascii_case(CONSOLE_LOG_LEVEL))
        .last()
        .and_then(|(_, value)| log_filter(value.as_ref()))
}

/// How guidebench takes one of GuideLLM's settings.
enum Take {
    /// `LOGGING__CONSOLE_LOG_LEVEL`.
    LogLevel,
    /// `LOGGING__CONSOLE_COLORIZE`: `auto` is what guidebench does.
    Colorize,
    /// `DEFAULT_SWEEP_NUMBER`.
    SweepNumber,
    /// `DEFAULT_RESULTS_DIR`.
    ResultsDir,
    /// `CONSTRAINT_ERROR_WINDOW_SIZE`.
    ErrorWindow,
    /// `CONSTRAINT_ERROR_MIN_PROCESSED`.
    ErrorMinProcessed,
    /// Refused: what it is in GuideLLM, and what to do instead.
    Refuse(&'static str),
}

const MP: &str = "GuideLLM's messaging between its worker processes; guidebench sends from \
                  one process with async tasks: unset it";
const TABLE: &str = "a character of GuideLLM's console tables; guidebench draws its own \
                     table: unset it (for the numbers as a file, --output csv or json)";

/// Every setting of GuideLLM 0.8.1's `Settings`, by its name after the
/// prefix, and how guidebench takes it.
const SETTINGS: &[(&str, Take)] = &[
    (
        "DEFAULT_ASYNC_LOOP_SLEEP",
        Take::Refuse(
            "GuideLLM's sleep between polls of its scheduler loops; guidebench's tasks wait \
             on events, not by polling: unset it",
        ),
    ),
    ("LOGGING__CONSOLE_LOG_LEVEL", Take::LogLevel),
    ("LOGGING__CONSOLE_COLORIZE", Take::Colorize),
    (
        "LOGGING__LOG_FILE",
        Take::Refuse(
            "GuideLLM's log file; guidebench logs to standard error only: unset it and \
             redirect standard error (2> guidebench.log)",
        ),
    ),
    (
        "LOGGING__LOG_FILE_LEVEL",
        Take::Refuse(
            "the level of GuideLLM's log file; guidebench has no log file: unset it, \
             redirect standard error and set GUIDEBENCH_LOG=LEVEL",
        ),
    ),
    ("DEFAULT_SWEEP_NUMBER", Take::SweepNumber),
    ("MP_CONTEXT_TYPE", Take::Refuse(MP)),
    ("MP_SERIALIZATION", Take::Refuse(MP)),
    ("MP_ENCODING", Take::Refuse(MP)),
    ("MP_MESSAGING_OBJECT", Take::Refuse(MP)),
    ("MP_REQUESTS_SEND_BUFFER_SIZE", Take::Refuse(MP)),
    ("MP_POLL_INTERVAL", Take::Refuse(MP)),
    ("MP_MAX_PENDING_BUFFER_PERCENT", Take::Refuse(MP)),
    ("MP_MAX_WORKER_BUFFER_PERCENT", Take::Refuse(MP)),
    (
        "MAX_CONCURRENCY",
        Take::Refuse(
            "GuideLLM's cap on requests in flight across its worker processes when the \
             profile sets none; guidebench caps by the profile: unset it and give the \
             profile max_concurrency=N (throughput, constant, poisson, async, sweep, replay)",
        ),
    ),
    (
        "MAX_WORKER_PROCESSES",
        Take::Refuse(
            "GuideLLM's worker process count; guidebench sends from one process with async \
             tasks: unset it",
        ),
    ),
    (
        "SCHEDULER_START_DELAY_NON_DISTRIBUTED",
        Take::Refuse(
            "GuideLLM's wait for its worker processes to start before the first request; \
             guidebench has no worker processes and starts each benchmark once the backend \
             is ready: unset it",
        ),
    ),
    ("CONSTRAINT_ERROR_WINDOW_SIZE", Take::ErrorWindow),
    ("CONSTRAINT_ERROR_MIN_PROCESSED", Take::ErrorMinProcessed),
    (
        "DATASET__PREFERRED_DATA_COLUMNS",
        Take::Refuse(
            "GuideLLM's prompt column names to look for; guidebench's file data looks for \
             prompt, text, input, question, instruction, content, messages, conversations: \
             unset it and name the column on the data, --data kind=file,...,prompt_column=NAME",
        ),
    ),
    (
        "DATASET__PREFERRED_DATA_SPLITS",
        Take::Refuse(
            "GuideLLM's dataset splits to look for; guidebench reads the split named on the \
             data (default train): unset it and name the split, --data ...,split=NAME",
        ),
    ),
    (
        "DEFAULT_SYNTHETIC_TOOL_RESPONSE",
        Take::Refuse(
            "the tool result GuideLLM's data sends back after a tool call; guidebench's data \
             makes no tool calls: unset it",
        ),
    ),
    ("DEFAULT_RESULTS_DIR", Take::ResultsDir),
    ("TABLE_BORDER_CHAR", Take::Refuse(TABLE)),
    ("TABLE_HEADERS_BORDER_CHAR", Take::Refuse(TABLE)),
    ("TABLE_COLUMN_SEPARATOR_CHAR", Take::Refuse(TABLE)),
];

/// GuideLLM's nested settings, which may also be given whole as a JSON
/// object (`GUIDELLM__LOGGING='{"console_log_level": "DEBUG"}'`).
const NESTED: &[&str] = &["LOGGING", "DATASET"];

/// The roots of GuideLLM's scenario (`BenchmarkScenario`) in the
/// environment.
const SCENARIO_ROOTS: &[&str] = &["SPEC", "METADATA", "BENCHMARKS"];

/// What guidebench takes from GuideLLM's environment settings.
#[derive(Debug, Default)]
pub struct EnvSettings {
    /// `GUIDELLM__SPEC__…`, `GUIDELLM__METADATA__…`, `GUIDELLM__BENCHMARKS`
    /// as a scenario, below a scenario file and the flags.
    pub scenario: Scenario,
    /// `GUIDELLM__SPEC__DATA_COLUMN_MAPPER`, below the file's and the
    /// flag's.
    pub(super) column_mappings: Option<ColumnMappings>,
    /// `LOGGING__CONSOLE_LOG_LEVEL` as a `tracing` filter.
    pub console_log_filter: Option<&'static str>,
    /// `DEFAULT_SWEEP_NUMBER`: the sweep profile's `sweep_size` when it
    /// gives none.
    pub sweep_size: Option<u64>,
    /// `DEFAULT_RESULTS_DIR`: where a file output without a path (and
    /// each default report file) goes.
    pub results_dir: Option<PathBuf>,
    /// `CONSTRAINT_ERROR_WINDOW_SIZE`: the `max_error_rate` constraint's
    /// `window` when it gives none.
    pub error_window: Option<u64>,
    /// `CONSTRAINT_ERROR_MIN_PROCESSED`: the `max_global_error_rate`
    /// constraint's `min_requests` when it gives none.
    pub error_min_requests: Option<u64>,
    /// The variables read, by name as given, sorted.
    pub used: Vec<String>,
}

/// One scenario variable: its name and its path, lower-cased.
struct ScenarioVar {
    name: String,
    path: Vec<String>,
}

impl EnvSettings {
    /// Reads GuideLLM's settings among `vars` (others are left alone).
    ///
    /// # Errors
    ///
    /// [`Error::Env`] naming every variable guidebench refuses (a setting
    /// it has no meaning for, a name that is no GuideLLM setting, a value
    /// that does not fit, a scenario field the GuideLLM scenario mapping
    /// refuses), each with why.
    pub fn read<I, K, V>(vars: I) -> Result<EnvSettings>
    where
        I: IntoIterator<Item = (K, V)>,
        K: Into<String>,
        V: Into<String>,
    {
        let mut vars: Vec<(String, String)> = vars
            .into_iter()
            .map(|(k, v)| (k.into(), v.into()))
            .filter(|(name, _)| is_guidellm_var(name))
            .collect();
        vars.sort();
        let mut settings = EnvSettings::default();
        let mut problems: Vec<(String, String)> = Vec::new();
        let mut scenario: Vec<(ScenarioVar, Value)> = Vec::new();
        for (name, value) in &vars {
            let key = name[PREFIX.len()..].to_ascii_uppercase();
            let root = key.split("__").next().unwrap_or_default();
            if SCENARIO_ROOTS.contains(&root) {
                let path = key.split("__").map(str::to_ascii_lowercase).collect();
                scenario.push((
                    ScenarioVar {
                        name: name.clone(),
                        path,
                    },
                    json_or_text(value),
                ));
                settings.used.push(name.clone());
                continue;
            }
            // A nested setting given whole, as a JSON object.
            if NESTED.contains(&key.as_str()) {
                let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(value) else {
                    problems.push((
                        name.clone(),
                        format!(
                            "GuideLLM reads it as a JSON object of its {} settings; set them \
                             one by one instead, as {PREFIX}{key}__NAME",
                            key.to_ascii_lowercase()
                        ),
                    ));
                    continue;
                };
                let before = problems.len();
                for (field, value) in fields {
                    let value = match value {
                        Value::String(text) => text,
                        other => other.to_string(),
                    };
                    let inner = format!("{key}__{}", field.to_ascii_uppercase());
                    settings.take(name, &inner, &value, &mut problems);
                }
                if problems.len() == before {
                    settings.used.push(name.clone());
                }
                continue;
            }
            let before = problems.len();
            settings.take(name, &key, value, &mut problems);
            if problems.len() == before {
                settings.used.push(name.clone());
            }
        }
        if !scenario.is_empty() {
            settings.read_scenario(scenario, &mut problems);
        }
        match problems.len() {
            0 => Ok(settings),
            1 => {
                let (var, reason) = problems.remove(0);
                Err(Error::Env { var, reason })
            }
            n => {
                let names: Vec<&str> = problems.iter().map(|(var, _)| var.as_str()).collect();
                let lines: Vec<String> = problems
                    .iter()
                    .map(|(var, reason)| format!("{var}: {reason}"))
                    .collect();
                Err(Error::Env {
                    var: names.join(", "),
                    reason: format!(
                        "{n} settings guidebench cannot take:\n  {}",
                        lines.join("\n  ")
                    ),
                })
            }
        }
    }

    /// Takes one of GuideLLM's settings (`key`, after the prefix,
    /// upper-cased) from `name`, or names it in `problems`.
    fn take(&mut self, name: &str, key: &str, value: &str, problems: &mut Vec<(String, String)>) {
        let Some((_, take)) = SETTINGS.iter().find(|(known, _)| *known == key) else {
            problems.push((name.to_owned(), unknown(key)));
            return;
        };
        let mut refuse = |reason: String| problems.push((name.to_owned(), reason));
        match take {
            Take::LogLevel => match log_filter(value) {
                Some(filter) => self.console_log_filter = Some(filter),
                None => refuse(format!(
                    "`{value}` is no log level; GuideLLM's (loguru's) are TRACE, DEBUG, INFO, \
                     SUCCESS, WARNING, ERROR, CRITICAL, or empty for none"
                )),
            },
            Take::Colorize => {
                if !value.trim().eq_ignore_ascii_case("auto") {
                    refuse(format!(
                        "`{value}`: guidebench colours its logs on a terminal only and writes \
                         plain text elsewhere, which is GuideLLM's auto: unset it or set auto"
                    ));
                }
            }
            Take::SweepNumber => match whole(value) {
                Some(n) if n >= 2 => self.sweep_size = Some(n),
                _ => refuse(format!(
                    "`{value}`: the sweep's default sweep_size is a whole number, at least 2"
                )),
            },
            Take::ResultsDir => {
                let dir = value.trim();
                self.results_dir = (!dir.is_empty()).then(|| PathBuf::from(dir));
            }
            Take::ErrorWindow => match whole(value) {
                Some(n) if n > 0 => self.error_window = Some(n),
                _ => refuse(format!(
                    "`{value}`: the max_error_rate constraint's default window is a whole \
                     number of requests, above 0"
                )),
            },
            Take::ErrorMinProcessed => match whole(value) {
                Some(n) if n > 0 => self.error_min_requests = Some(n),
                _ => refuse(format!(
                    "`{value}`: the max_global_error_rate constraint's default min_requests \
                     is a whole number of requests, above 0"
                )),
            },
            Take::Refuse(why) => refuse((*why).to_owned()),
        }
    }

    /// Builds GuideLLM's scenario object from its variables and maps it,
    /// naming the variables behind every field that cannot be mapped.
    fn read_scenario(
        &mut self,
        mut vars: Vec<(ScenarioVar, Value)>,
        problems: &mut Vec<(String, String)>,
    ) {
        // The shorter paths first: a variable inside one given as a JSON
        // object sets its field in it, as in GuideLLM.
        vars.sort_by_key(|(var, _)| var.path.len());
        let mut root = Map::new();
        let mut bad = false;
        for (var, value) in &vars {
            if let Err(holder) = set(&mut root, &var.path, value.clone()) {
                let by = vars
                    .iter()
                    .find(|(other, _)| other.path == holder)
                    .map_or_else(String::new, |(other, _)| format!(" by {}", other.name));
                problems.push((
                    var.name.clone(),
                    format!(
                        "sets a field inside `{}`, which is set{by} to a value that is not \
                         an object",
                        holder.join(".")
                    ),
                ));
                bad = true;
            }
        }
        if bad {
            return;
        }
        let names: Vec<&ScenarioVar> = vars.iter().map(|(var, _)| var).collect();
        // GuideLLM's backend kind defaults to openai_http.
        if let Some(Value::Object(backend)) = root
            .get_mut("spec")
            .and_then(|spec| spec.get_mut("backend"))
            && !backend.contains_key("kind")
        {
            backend.insert("kind".into(), Value::String("openai_http".into()));
        }
        let root = Value::Object(root);
        let converted = match guidellm::convert(&root) {
            Ok(converted) => converted,
            Err(fields) => {
                problems.push((
                    involved(&names, &fields),
                    format!("GuideLLM scenario fields guidebench cannot map: {fields}"),
                ));
                return;
            }
        };
        match serde_json::from_value::<Scenario>(converted) {
            Ok(scenario) => self.scenario = scenario,
            Err(e) => problems.push((involved(&names, ""), e.to_string())),
        }
        if let Some(mapper) = scenario_mapper(&root) {
            match ColumnMappings::from_value(mapper) {
                Ok(mappings) => self.column_mappings = Some(mappings),
                Err(why) => problems.push((
                    involved(&names, "`spec.data_column_mapper`"),
                    format!("`spec.data_column_mapper` ({why})"),
                )),
            }
        }
    }

    /// The environment's scenario below `file` (a scenario file's):
    /// each field the file leaves out is the environment's, and the
    /// labels are both, the file's winning.
    pub(super) fn under(&self, mut file: Scenario) -> Scenario {
        let env = self.scenario.clone();
        let mut labels = env.label.unwrap_or_default();
        if let Some(file_labels) = file.label.take() {
            labels.extend(file_labels);
        }
        Scenario {
            backend: file.backend.or(env.backend),
            data: file.data.or(env.data),
            profile: file.profile.or(env.profile),
            constraint: file.constraint.or(env.constraint),
            output: file.output.or(env.output),
            tokenizer: file.tokenizer.or(env.tokenizer),
            seed: file.seed.or(env.seed),
            warmup: file.warmup.or(env.warmup),
            cooldown: file.cooldown.or(env.cooldown),
            label: (!labels.is_empty()).then_some(labels),
            grace_period: file.grace_period.or(env.grace_period),
            disable_progress: file.disable_progress.or(env.disable_progress),
            disable_console: file.disable_console.or(env.disable_console),
            slo: file.slo.or(env.slo),
        }
    }

    /// The environment's column mappings, if it gives any.
    pub(super) fn column_mappings(&self) -> Option<&ColumnMappings> {
        self.column_mappings.as_ref()
    }

    /// Fills in the defaults the settings give, where the plan (its
    /// profile and constraints, after `--override`) leaves them out:
    /// the sweep's `sweep_size`, `max_error_rate`'s `window`,
    /// `max_global_error_rate`'s `min_requests`.
    pub(super) fn fill_defaults(&self, plan: &mut PlanArgs) {
        if let (Some(n), Some(profile)) = (self.sweep_size, plan.profile.as_mut())
            && let Some(filled) = with_default(profile, "sweep", &["sweep_size"], n)
        {
            *profile = filled;
        }
        for constraint in &mut plan.constraints {
            let filled = self
                .error_window
                .and_then(|n| with_default(constraint, "max_error_rate", &["window"], n))
                .or_else(|| {
                    self.error_min_requests.and_then(|n| {
                        with_default(
                            constraint,
                            "max_global_error_rate",
                            &["min_requests", "minimum"],
                            n,
                        )
                    })
                });
            if let Some(filled) = filled {
                *constraint = filled;
            }
        }
    }
}

/// A value as GuideLLM's settings take it: JSON when it parses, else the
/// text.
fn json_or_text(value: &str) -> Value {
    serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_owned()))
}

/// A whole number, written as one (`30`) or as a whole float (`30.0`),
/// as GuideLLM's settings take them.
fn whole(value: &str) -> Option<u64> {
    let value = value.trim();
    value.parse::<u64>().ok().or_else(|| {
        let n: f64 = value.parse().ok()?;
        (n.fract() == 0.0 && n >= 0.0 && n < u64::MAX as f64).then_some(n as u64)
    })
}

/// Sets `value` at `path` in `root`, making objects on the way; `Err`
/// with the path of a value on the way that is not an object.
fn set(root: &mut Map<String, Value>, path: &[String], value: Value) -> Result<(), Vec<String>> {
    let Some((last, parents)) = path.split_last() else {
        return Ok(());
    };
    let mut node = root;
    for (depth, part) in parents.iter().enumerate() {
        let child = node
            .entry(part.clone())
            .or_insert_with(|| Value::Object(Map::new()));
        match child {
            Value::Object(map) => node = map,
            _ => return Err(path[..=depth].to_vec()),
        }
    }
    match (node.get_mut(last), value) {
        (Some(Value::Object(existing)), Value::Object(value)) => existing.extend(value),
        (_, value) => {
            node.insert(last.clone(), value);
        }
    }
    Ok(())
}

/// The scenario variables behind the fields named (in backquotes) in a
/// mapping error: each whose path holds or lies inside a field's; all of
/// them when none does.
fn involved(vars: &[&ScenarioVar], fields: &str) -> String {
    let paths: Vec<Vec<String>> = fields
        .split('`')
        .skip(1)
        .step_by(2)
        .map(|field| {
            field
                .split('.')
                .map(|part| part.split('[').next().unwrap_or_default().to_owned())
                .collect()
        })
        .collect();
    let related = |var: &&&ScenarioVar| {
        paths.iter().any(|path| {
            let n = path.len().min(var.path.len());
            path[..n] == var.path[..n]
        })
    };
    let mut names: Vec<&str> = vars
        .iter()
        .filter(related)
        .map(|var| var.name.as_str())
        .collect();
    if names.is_empty() {
        names = vars.iter().map(|var| var.name.as_str()).collect();
    }
    names.join(", ")
}

/// Why a name after the prefix is refused: it is no GuideLLM setting;
/// the nearest, or the list of them.
fn unknown(key: &str) -> String {
    let known = SETTINGS
        .iter()
        .map(|(name, _)| *name)
        .chain(SCENARIO_ROOTS.iter().map(|root| match *root {
            "BENCHMARKS" => "BENCHMARKS",
            "SPEC" => "SPEC__…",
            _ => "METADATA__…",
        }));
    let nearest = SETTINGS
        .iter()
        .map(|(name, _)| *name)
        .chain(SCENARIO_ROOTS.iter().copied())
        .map(|name| (distance(key, name), name))
        .min();
    match nearest {
        Some((d, name)) if d <= name.len().max(key.len()) / 3 => {
            format!("no GuideLLM setting has this name; did you mean {PREFIX}{name}?")
        }
        _ => format!(
            "no GuideLLM setting has this name; GuideLLM 0.8.1's are {}",
            known
                .map(|name| format!("{PREFIX}{name}"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

/// The edit distance between two names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let above = row[j + 1];
            row[j + 1] = (diagonal + usize::from(ca != *cb))
                .min(above + 1)
                .min(row[j] + 1);
            diagonal = above;
        }
    }
    row[b.len()]
}

/// `arg` (a `kind=…` argument) with `keys[0]=value` added, as its JSON
/// form, when it is of `kind` and has none of `keys`; `None` otherwise.
fn with_default(arg: &str, kind: &str, keys: &[&str], value: u64) -> Option<String> {
    let args = parse_kind_args(arg).ok()?;
    if args.kind != kind || keys.iter().any(|key| args.options.contains_key(*key)) {
        return None;
    }
    let mut object = args.options;
    object.insert(keys[0].to_owned(), Value::from(value));
    object.insert("kind".into(), Value::String(args.kind));
    Some(Value::Object(object).to_string())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::Flags;
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<EnvSettings> {
        EnvSettings::read(vars.iter().map(|(k, v)| (*k, *v)))
    }

    fn options(arg: &str) -> Map<String, Value> {
        let args = parse_kind_args(arg).expect("parses");
        let mut options = args.options;
        options.insert("kind".into(), Value::String(args.kind));
        options
    }

    #[test]
    fn a_spec_variable_becomes_the_backend_target() {
        let env = read(&[
            ("GUIDELLM__SPEC__BACKEND__TARGET", "http://localhost:8000"),
            ("GUIDELLM__SPEC__BACKEND__MODEL", "my-model"),
            ("GUIDELLM__METADATA__LABELS__TEAM", "infra"),
            ("PATH", "/usr/bin"),
            ("GUIDELLM_SINGLE", "not ours"),
        ])
        .expect("reads");
        let backend = options(&env.scenario.backend.as_ref().expect("backend").to_arg());
        assert_eq!(backend["target"], "http://localhost:8000");
        assert_eq!(backend["model"], "my-model");
        assert_eq!(backend["kind"], "openai_http", "GuideLLM's default kind");
        let labels = env.scenario.label.as_ref().expect("labels");
        assert_eq!(labels["team"], "infra");
        assert_eq!(
            env.used,
            [
                "GUIDELLM__METADATA__LABELS__TEAM",
                "GUIDELLM__SPEC__BACKEND__MODEL",
                "GUIDELLM__SPEC__BACKEND__TARGET",
            ]
        );
    }

    #[test]
    fn a_json_value_parses_and_nested_variables_set_fields_inside_it() {
        let env = read(&[
            (
                "GUIDELLM__SPEC__DATA",
                r#"[{"kind": "synthetic_text", "prompt_tokens": 8, "output_tokens": 2}]"#,
            ),
            (
                "GUIDELLM__SPEC__PROFILE",
                r#"{"kind": "concurrent", "streams": 1}"#,
            ),
            ("GUIDELLM__SPEC__PROFILE__STREAMS", "[1, 2]"),
            ("GUIDELLM__SPEC__SEED", "7"),
        ])
        .expect("reads");
        let data = env.scenario.data.as_ref().expect("data").to_args();
        assert_eq!(options(&data[0])["prompt_tokens"], 8);
        let profile = options(&env.scenario.profile.as_ref().expect("profile").to_arg());
        assert_eq!(profile["kind"], "concurrent");
        assert_eq!(profile["streams"], serde_json::json!([1, 2]));
        assert_eq!(env.scenario.seed, Some(7));
    }

    #[test]
    fn a_flag_beats_the_scenario_file_which_beats_the_environment() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = dir.path().join("scenario.yaml");
        std::fs::write(&file, "warmup: 3\nlabel: {team: file}\n").expect("write");
        let json = dir.path().join("r.json").display().to_string();
        let flags = Flags {
            scenario: Some(file),
            profile: Some("kind=synchronous".into()),
            output: vec![json],
            guidellm_env: [
                (
                    "GUIDELLM__SPEC__PROFILE",
                    r#"{"kind": "constant", "rate": 5}"#,
                ),
                (
                    "GUIDELLM__SPEC__DATA",
                    "kind=synthetic_text,prompt_tokens=4",
                ),
                ("GUIDELLM__SPEC__PROFILE__WARMUP", "1"),
                ("GUIDELLM__METADATA__LABELS__TEAM", "env"),
                ("GUIDELLM__METADATA__LABELS__SITE", "lab"),
            ]
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
            ..Flags::default()
        };
        let run = flags.plan("kind=offline,engine=mock").expect("plans");
        let plan = &run.plans[0];
        assert_eq!(
            plan.profile.as_deref(),
            Some("kind=synchronous"),
            "the flag"
        );
        assert_eq!(
            plan.data,
            ["kind=synthetic_text,prompt_tokens=4"],
            "the env"
        );
        assert_eq!(plan.warmup.as_deref(), Some("3"), "the file");
        assert_eq!(plan.labels["team"], "file");
        assert_eq!(plan.labels["site"], "lab");
    }

    #[test]
    fn the_sweep_size_and_error_windows_are_defaults_the_plan_may_override() {
        let env = read(&[
            ("GUIDELLM__DEFAULT_SWEEP_NUMBER", "4"),
            ("GUIDELLM__CONSTRAINT_ERROR_WINDOW_SIZE", "50"),
            ("guidellm__constraint_error_min_processed", "60.0"),
            ("GUIDELLM__LOGGING", r#"{"console_log_level": "warning"}"#),
            ("GUIDELLM__DEFAULT_RESULTS_DIR", "results"),
        ])
        .expect("reads");
        assert_eq!(env.console_log_filter, Some("warn"));
        assert_eq!(env.results_dir, Some(PathBuf::from("results")));
        let mut plan = PlanArgs {
            profile: Some("kind=sweep".into()),
            constraints: vec![
                "kind=max_error_rate,rate=0.1".into(),
                "kind=max_global_error_rate,rate=0.2".into(),
                "kind=max_error_rate,rate=0.1,window=9".into(),
            ],
            ..PlanArgs::default()
        };
        env.fill_defaults(&mut plan);
        assert_eq!(
            options(plan.profile.as_deref().expect("profile"))["sweep_size"],
            4
        );
        assert_eq!(options(&plan.constraints[0])["window"], 50);
        assert_eq!(options(&plan.constraints[1])["min_requests"], 60);
        assert_eq!(options(&plan.constraints[2])["window"], 9, "its own wins");
        let mut own = PlanArgs {
            profile: Some("kind=sweep,sweep_size=3".into()),
            ..PlanArgs::default()
        };
        env.fill_defaults(&mut own);
        assert_eq!(own.profile.as_deref(), Some("kind=sweep,sweep_size=3"));
    }

    #[test]
    fn the_results_dir_holds_the_default_files_and_outputs_without_a_path() {
        let dir = tempfile::tempdir().expect("tempdir");
        let results = dir.path().display().to_string();
        let elsewhere = tempfile::tempdir().expect("tempdir");
        let own = elsewhere.path().join("own.json").display().to_string();
        let plan = |output: Vec<String>| {
            Flags {
                output,
                guidellm_env: vec![("GUIDELLM__DEFAULT_RESULTS_DIR".into(), results.clone())],
                ..Flags::default()
            }
            .plan("kind=offline,engine=mock")
            .expect("plans")
            .outputs
        };
        let paths = |outputs: Vec<crate::outputs::Output>| -> Vec<Option<PathBuf>> {
            outputs
                .iter()
                .map(|o| o.path().map(Path::to_path_buf))
                .collect()
        };
        assert_eq!(
            paths(plan(Vec::new())),
            [
                None,
                Some(dir.path().join("benchmarks.json")),
                Some(dir.path().join("benchmarks.csv")),
            ]
        );
        assert_eq!(
            paths(plan(vec!["kind=csv".into(), "html".into(), own.clone()])),
            [
                None,
                Some(dir.path().join("benchmarks.csv")),
                Some(dir.path().join("benchmarks.html")),
                Some(PathBuf::from(own)),
            ]
        );
    }

    #[test]
    fn a_refused_setting_names_itself_and_why() {
        let err = read(&[("GUIDELLM__MAX_WORKER_PROCESSES", "4")]).expect_err("refused");
        assert!(err.is_usage(), "{err}");
        assert_eq!(
            err.to_string(),
            "environment variable GUIDELLM__MAX_WORKER_PROCESSES: GuideLLM's worker process \
             count; guidebench sends from one process with async tasks: unset it"
        );
        let err = read(&[("GUIDELLM__DATASET__PREFERRED_DATA_COLUMNS", r#"["q"]"#)])
            .expect_err("refused");
        assert!(err.to_string().contains("prompt_column=NAME"), "{err}");
        let err = read(&[("GUIDELLM__LOGGING__CONSOLE_LOG_LEVEL", "LOUD")]).expect_err("no level");
        assert!(err.to_string().contains("`LOUD` is no log level"), "{err}");
    }

    #[test]
    fn an_unknown_setting_is_refused_with_the_nearest_or_the_known_ones() {
        let err = read(&[("GUIDELLM__MAX_CONCURENCY", "8")]).expect_err("unknown");
        assert!(
            err.to_string()
                .contains("did you mean GUIDELLM__MAX_CONCURRENCY?"),
            "{err}"
        );
        let err = read(&[("GUIDELLM__COLOUR", "blue")]).expect_err("unknown");
        let message = err.to_string();
        assert!(
            message.starts_with("environment variable GUIDELLM__COLOUR:"),
            "{message}"
        );
        assert!(
            message.contains("GUIDELLM__DEFAULT_RESULTS_DIR"),
            "{message}"
        );
        let err = read(&[("GUIDELLM__SPEC__COLOUR", "blue")]).expect_err("unknown field");
        assert!(
            err.to_string()
                .starts_with("environment variable GUIDELLM__SPEC__COLOUR: ")
                && err.to_string().contains("`spec.colour` (unknown field)"),
            "{err}"
        );
    }

    #[test]
    fn several_bad_variables_are_all_named() {
        let err = read(&[
            ("GUIDELLM__MP_POLL_INTERVAL", "0.5"),
            ("GUIDELLM__SPEC__BACKEND__TARGET", "http://h:8000"),
            ("GUIDELLM__SPEC__PROFILE__KIND", "sweep"),
            (
                "GUIDELLM__BENCHMARKS",
                r#"[{"profile.sweep_size": 3}, {"profile.sweep_size": 5}]"#,
            ),
            ("GUIDELLM__TABLE_BORDER_CHAR", "#"),
            ("GUIDELLM__NOPE", "1"),
        ])
        .expect_err("refused");
        let Error::Env { var, reason } = &err else {
            panic!("{err}");
        };
        assert_eq!(
            var,
            "GUIDELLM__MP_POLL_INTERVAL, GUIDELLM__NOPE, GUIDELLM__TABLE_BORDER_CHAR, \
             GUIDELLM__BENCHMARKS"
        );
        assert!(
            reason.starts_with("4 settings guidebench cannot take:"),
            "{reason}"
        );
        assert!(
            reason.contains("benchmarks[*].profile.sweep_size"),
            "{reason}"
        );
        assert!(
            reason.contains("GUIDELLM__TABLE_BORDER_CHAR: a character"),
            "{reason}"
        );
    }

    #[test]
    fn the_console_log_level_maps_loguru_levels() {
        let level = |value: &str| console_log_filter([(CONSOLE_LOG_LEVEL, value)]);
        assert_eq!(level("DEBUG"), Some("debug"));
        assert_eq!(level("success"), Some("info"));
        assert_eq!(level("CRITICAL"), Some("error"));
        assert_eq!(level(""), Some("off"));
        assert_eq!(level("LOUD"), None);
        assert_eq!(console_log_filter([("GUIDEBENCH_LOG", "debug")]), None);
    }
}
