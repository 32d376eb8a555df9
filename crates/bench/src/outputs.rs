//! `--output kind=…`: where a report goes.
//!
//! [`OUTPUT_KINDS`] is the one list of output kinds: each kind's name,
//! description, what it writes, its keys, and how its options become an
//! [`Output`]. Help, checks and construction all come from it; an unknown
//! kind is a usage error that lists the known ones, and nothing falls back
//! to a default kind.
//!
//! Guarantees, each held by a test below:
//!
//! * `--output FILE.json` (`.csv`, `.html`, `.yaml`, `.png`) picks the
//!   kind from the extension, and a file kind without `path` writes
//!   `benchmarks.<ext>` in the current folder, as GuideLLM does
//!   (`a_file_name_picks_its_kind_and_a_kind_alone_writes_benchmarks_in_the_current_folder`);
//! * with no `--output`, a run writes what GuideLLM's `run` writes: the
//!   console, `benchmarks.json` and `benchmarks.csv` in the current folder
//!   (`no_output_given_means_the_console_benchmarks_json_and_benchmarks_csv`);
//! * `kind=json` and `kind=yaml` write GuideLLM 0.8.1's report document
//!   (which GuideLLM itself loads) with guidebench's own report under its
//!   `guidebench` key, or with `schema=guidebench` guidebench's report
//!   alone (`json_and_yaml_hold_guidellm_s_document_with_guidebench_s_report_inside`);
//! * every file output is checked before anything runs: its folder exists
//!   and takes a new file (`an_output_in_a_missing_or_read_only_folder_is_refused_before_the_run`),
//!   and no two outputs write one file
//!   (`two_outputs_on_one_file_are_refused_before_the_run`);
//! * a report whose outputs could not be written still lands in a
//!   fallback file (`the_fallback_file_holds_the_whole_report`).

use std::path::{Path, PathBuf};

use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options, parse_kind_args};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::report::{
    Report, Schema, console_summary, write_csv, write_html, write_json_document, write_plot,
    write_yaml_document,
};
use crate::{Error, Result};

/// One output kind: its name, what it is, what it writes, its keys, and
/// how its checked options become an [`Output`].
#[derive(Debug)]
pub struct OutputKind {
    /// `kind=NAME`.
    pub name: &'static str,
    /// One line for help.
    pub description: &'static str,
    /// What it writes, as an error names it (`the CSV report`).
    pub writes: &'static str,
    /// Its keys besides `kind`.
    pub options: &'static [OptionSpec],
    /// The output, from options already checked against `options`.
    build: fn(&Map<String, Value>) -> Output,
}

/// The `path` of a file kind; its default comes from the kind's defaults
/// struct (`benchmarks.<ext>` in the current folder).
const PATH: OptionSpec = OptionSpec::optional("path", OptionType::String, "file to write");

/// The defaults of a file kind that has no other option: `path`.
macro_rules! file_defaults {
    ($name:ident, $file:literal, $kind:literal) => {
        #[doc = concat!("The defaults of `kind=", $kind, "`: the file it writes.")]
        #[derive(Debug, Serialize)]
        struct $name {
            path: &'static str,
        }

        impl Default for $name {
            fn default() -> Self {
                $name { path: $file }
            }
        }
    };
}

file_defaults!(CsvDefaults, "benchmarks.csv", "csv");
file_defaults!(HtmlDefaults, "benchmarks.html", "html");
file_defaults!(PlotDefaults, "benchmarks.png", "plot");

/// `kind=console`.
const CONSOLE: OutputKind = OutputKind {
    name: "console",
    description: "the summary tables on standard output",
    writes: "the summary",
    options: &[],
    build: |_| Output::Console,
};

/// `kind=csv`.
const CSV: OutputKind = OutputKind {
    name: "csv",
    description: "one CSV row per benchmark",
    writes: "the CSV report",
    options: &[PATH.default_from::<CsvDefaults>()],
    build: |options| Output::Csv(path(options, CsvDefaults::default().path)),
};

/// `kind=html`.
const HTML: OutputKind = OutputKind {
    name: "html",
    description: "a self-contained HTML page",
    writes: "the HTML report",
    options: &[PATH.default_from::<HtmlDefaults>()],
    build: |options| Output::Html(path(options, HtmlDefaults::default().path)),
};

/// `kind=json`.
const JSON: OutputKind = OutputKind {
    name: "json",
    description: "the whole report, per-request records included",
    writes: "the JSON report",
    options: &[
        PATH.default_from::<JsonDefaults>(),
        OptionSpec::optional(
            "include_text",
            OptionType::Bool,
            "keep each request's generated text",
        )
        .default_from::<JsonDefaults>(),
        SCHEMA.default_from::<JsonDefaults>(),
    ],
    build: |options| Output::Json {
        path: path(options, JsonDefaults::default().path),
        include_text: options
            .get("include_text")
            .and_then(Value::as_bool)
            .unwrap_or(JsonDefaults::default().include_text),
        schema: schema(options),
    },
};

/// The `schema` of `kind=json` and `kind=yaml`.
const SCHEMA: OptionSpec = OptionSpec::optional(
    "schema",
    OptionType::Choice(&["guidellm", "guidebench"]),
    "guidellm: GuideLLM 0.8.1's report, which GuideLLM opens, with guidebench's \
     inside under `guidebench`; guidebench: guidebench's report alone",
);

/// The `schema` option, or the default.
fn schema(options: &Map<String, Value>) -> Schema {
    match options.get("schema").and_then(Value::as_str) {
        Some("guidebench") => Schema::Guidebench,
        Some(_) => Schema::GuideLlm,
        None => Schema::default(),
    }
}

/// The defaults of `kind=json`'s options, as [`Output::parse`] applies
/// them; keyed by option name.
#[derive(Debug, Serialize)]
struct JsonDefaults {
    path: &'static str,
    include_text: bool,
    schema: Schema,
}

impl Default for JsonDefaults {
    fn default() -> Self {
        JsonDefaults {
            path: "benchmarks.json",
            include_text: false,
            schema: Schema::default(),
        }
    }
}

/// The defaults of `kind=yaml`'s options.
#[derive(Debug, Serialize)]
struct YamlDefaults {
    path: &'static str,
    schema: Schema,
}

impl Default for YamlDefaults {
    fn default() -> Self {
        YamlDefaults {
            path: "benchmarks.yaml",
            schema: Schema::default(),
        }
    }
}

/// `kind=plot`.
const PLOT: OutputKind = OutputKind {
    name: "plot",
    description: "the main charts as a PNG image",
    writes: "the chart image",
    options: &[
        OptionSpec::optional("path", OptionType::String, "PNG file to write")
            .default_from::<PlotDefaults>(),
    ],
    build: |options| Output::Plot(path(options, PlotDefaults::default().path)),
};

/// `kind=yaml`.
const YAML: OutputKind = OutputKind {
    name: "yaml",
    description: "the JSON report's document as YAML",
    writes: "the YAML report",
    options: &[
        PATH.default_from::<YamlDefaults>(),
        SCHEMA.default_from::<YamlDefaults>(),
    ],
    build: |options| Output::Yaml {
        path: path(options, YamlDefaults::default().path),
        schema: schema(options),
    },
};

/// Every output kind, sorted by name.
pub const OUTPUT_KINDS: &[OutputKind] = &[CONSOLE, CSV, HTML, JSON, PLOT, YAML];

/// The `path` option, or the kind's default file in the current folder; a
/// folder (a path ending in `/`, or one that exists) gets the default
/// file inside it, as GuideLLM writes `results/benchmarks.json` for
/// `path=results/`.
fn path(options: &Map<String, Value>, default: &str) -> PathBuf {
    let Some(given) = options.get("path").and_then(Value::as_str) else {
        return PathBuf::from(default);
    };
    let path = PathBuf::from(given);
    if given.ends_with('/') || given.ends_with(std::path::MAIN_SEPARATOR) || path.is_dir() {
        path.join(default)
    } else {
        path
    }
}

/// The kind a file name's extension picks (`--output out.json`).
fn kind_of_extension(path: &Path) -> Option<&'static OutputKind> {
    let extension = path.extension()?.to_str()?.to_ascii_lowercase();
    Some(match extension.as_str() {
        "json" => &JSON,
        "csv" => &CSV,
        "html" | "htm" => &HTML,
        "yaml" | "yml" => &YAML,
        "png" => &PLOT,
        _ => return None,
    })
}

/// One parsed `--output`.
#[derive(Debug, Clone, PartialEq)]
pub enum Output {
    /// The summary table on standard output.
    Console,
    /// One CSV row per benchmark.
    Csv(PathBuf),
    /// A self-contained HTML page.
    Html(PathBuf),
    /// The main charts as a PNG image.
    Plot(PathBuf),
    /// The JSON report's document as YAML.
    Yaml {
        /// Where.
        path: PathBuf,
        /// Which document.
        schema: Schema,
    },
    /// The whole report, per-request records included.
    Json {
        /// Where.
        path: PathBuf,
        /// Keep generated text in the records.
        include_text: bool,
        /// Which document.
        schema: Schema,
    },
}

impl Output {
    /// Parses one `--output` argument: `kind=NAME,key=value,...`, a JSON
    /// object, a kind's name alone (`json`: its default file), or a file
    /// name whose extension picks the kind (`out.json`, `out.csv`,
    /// `out.html`, `out.yaml`, `out.png`).
    ///
    /// # Errors
    ///
    /// A malformed argument, an unknown kind (the error lists the known
    /// ones), an extension that names no kind, or an unknown, missing or
    /// mistyped key.
    pub fn parse(arg: &str) -> Result<Output> {
        let trimmed = arg.trim();
        if !trimmed.is_empty() && !trimmed.starts_with('{') && !trimmed.contains('=') {
            if let Some(kind) = OUTPUT_KINDS.iter().find(|k| k.name == trimmed) {
                return Output::from_args(parse_kind_args(&format!("kind={}", kind.name))?);
            }
            let path = Path::new(trimmed);
            let Some(kind) = kind_of_extension(path) else {
                return Err(Error::Flag {
                    flag: "--output",
                    reason: format!(
                        "`{trimmed}`: a file name's extension picks the kind (.json, .csv, \
                         .html, .yaml, .png), or write kind=NAME,path={trimmed} with NAME one \
                         of {}",
                        kind_names()
                    ),
                });
            };
            let mut options = Map::new();
            options.insert("path".into(), Value::String(trimmed.to_owned()));
            return Output::from_args(KindArgs {
                kind: kind.name.to_owned(),
                options,
            });
        }
        Output::from_args(parse_kind_args(arg)?)
    }

    fn from_args(mut args: KindArgs) -> Result<Output> {
        let Some(kind) = OUTPUT_KINDS.iter().find(|k| k.name == args.kind) else {
            return Err(guidebench_core::Error::UnknownName {
                what: "output kind",
                name: args.kind,
                available: OUTPUT_KINDS.iter().map(|k| k.name.to_owned()).collect(),
            }
            .into());
        };
        check_options(
            &format!("output {}", args.kind),
            &[kind.options],
            &mut args.options,
        )?;
        Ok((kind.build)(&args.options))
    }

    /// The kind of this output, in [`OUTPUT_KINDS`].
    pub fn kind(&self) -> &'static OutputKind {
        match self {
            Output::Console => &CONSOLE,
            Output::Csv(_) => &CSV,
            Output::Html(_) => &HTML,
            Output::Plot(_) => &PLOT,
            Output::Yaml { .. } => &YAML,
            Output::Json { .. } => &JSON,
        }
    }

    /// The file this output writes; `None` for the console.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Output::Console => None,
            Output::Csv(path)
            | Output::Html(path)
            | Output::Plot(path)
            | Output::Yaml { path, .. }
            | Output::Json { path, .. } => Some(path),
        }
    }

    /// Checks, before anything runs, that the file can be written: its
    /// folder exists and takes a new file (a probe file is created and
    /// removed), or the file exists and opens for writing (unchanged).
    ///
    /// # Errors
    ///
    /// [`Error::Flag`] (a usage error) naming the path and what is wrong.
    pub fn check_writable(&self) -> Result<()> {
        let Some(path) = self.path() else {
            return Ok(());
        };
        writable(path).map_err(|why| Error::Flag {
            flag: "--output",
            reason: format!("`{}`: {why}", path.display()),
        })
    }

    /// Whether the records must keep generated text.
    pub fn wants_text(&self) -> bool {
        matches!(
            self,
            Output::Json {
                include_text: true,
                ..
            }
        )
    }

    /// Writes the report; returns what it wrote, for the run's closing
    /// lines (`benchmarks.json (JSON: GuideLLM's report with guidebench's,
    /// 2 benchmarks)`), or `None` for the console.
    ///
    /// # Errors
    ///
    /// [`Error::Output`], naming what could not be written where, and why.
    pub fn write(&self, report: &Report) -> Result<Option<String>> {
        let (path, result) = match self {
            Output::Console => {
                print!("{}", console_summary(report));
                return Ok(None);
            }
            Output::Csv(path) => (path, write_csv(report, path).map_err(Error::from)),
            Output::Html(path) => (path, write_html(report, path)),
            Output::Plot(path) => (path, write_plot(report, path)),
            Output::Yaml { path, schema } => (path, write_yaml_document(report, path, *schema)),
            Output::Json { path, schema, .. } => (path, write_json_document(report, path, *schema)),
        };
        result.map_err(|source| Error::Output {
            writes: self.kind().writes,
            path: path.clone(),
            source: Box::new(source),
        })?;
        let what = match self {
            Output::Console => return Ok(None),
            Output::Csv(_) => "CSV".to_owned(),
            Output::Html(_) => "HTML".to_owned(),
            Output::Plot(_) => "PNG charts".to_owned(),
            Output::Yaml { schema, .. } => format!("YAML: {}", schema.label()),
            Output::Json { schema, .. } => format!("JSON: {}", schema.label()),
        };
        let count = report.benchmarks.len();
        let plural = if count == 1 { "" } else { "s" };
        Ok(Some(format!(
            "{} ({what}, {count} benchmark{plural})",
            path.display()
        )))
    }
}

/// Why `path` cannot be written, if it cannot.
fn writable(path: &Path) -> std::result::Result<(), String> {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match std::fs::metadata(folder) {
        Err(_) => return Err(format!("the folder `{}` does not exist", folder.display())),
        Ok(meta) if !meta.is_dir() => {
            return Err(format!("`{}` is not a folder", folder.display()));
        }
        Ok(_) => {}
    }
    if let Ok(meta) = std::fs::metadata(path) {
        if meta.is_dir() {
            return Err("it is a folder; name a file".to_owned());
        }
        // Opened to append and closed at once: the file is not changed.
        return std::fs::OpenOptions::new()
            .append(true)
            .open(path)
            .map(drop)
            .map_err(|e| format!("the file cannot be written: {e}"));
    }
    let probe = folder.join(format!(".guidebench-probe-{}", std::process::id()));
    match std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
    {
        Ok(file) => {
            drop(file);
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        Err(e) => Err(format!(
            "the folder `{}` does not take a new file: {e}",
            folder.display()
        )),
    }
}

/// Every kind's name, joined with commas.
fn kind_names() -> String {
    OUTPUT_KINDS
        .iter()
        .map(|k| k.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a run writes when no `--output` is given, as GuideLLM's `run`
/// does: the console, `benchmarks.json` (GuideLLM's document with
/// guidebench's inside) and `benchmarks.csv` in the current folder.
pub fn run_defaults() -> Vec<Output> {
    vec![
        Output::Console,
        Output::Json {
            path: JsonDefaults::default().path.into(),
            include_text: JsonDefaults::default().include_text,
            schema: Schema::default(),
        },
        Output::Csv(CsvDefaults::default().path.into()),
    ]
}

/// What `export` writes when no `--output` is given, as GuideLLM's
/// `export` does: the console, `benchmarks.json`, `benchmarks.html` and
/// `benchmarks.csv` in the current folder.
pub fn export_defaults() -> Vec<Output> {
    let mut outputs = run_defaults();
    outputs.insert(2, Output::Html(HtmlDefaults::default().path.into()));
    outputs
}

/// Parses every `--output`; with none, `defaults`.
///
/// # Errors
///
/// The first argument [`Output::parse`] refuses, or two outputs that
/// write one file.
pub fn parse_all_or(
    args: &[String],
    defaults: impl FnOnce() -> Vec<Output>,
) -> Result<Vec<Output>> {
    let outputs = if args.is_empty() {
        defaults()
    } else {
        args.iter()
            .map(|a| Output::parse(a))
            .collect::<Result<Vec<_>>>()?
    };
    refuse_shared_files(&outputs)?;
    Ok(outputs)
}

/// Parses every `--output` of a run; with none, [`run_defaults`].
///
/// # Errors
///
/// See [`parse_all_or`].
pub fn parse_all(args: &[String]) -> Result<Vec<Output>> {
    parse_all_or(args, run_defaults)
}

/// Parses every `--output` of a run as [`parse_all`] does, except that
/// with `results_dir` (GuideLLM's `GUIDELLM__DEFAULT_RESULTS_DIR`) a file
/// kind given without `path` (`kind=json`, `csv`), and each default file
/// when none is given, goes in that folder instead of the current one, as
/// GuideLLM's outputs default to `DEFAULT_RESULTS_DIR/benchmarks.EXT`.
///
/// # Errors
///
/// See [`parse_all_or`].
pub fn parse_all_in(args: &[String], results_dir: Option<&Path>) -> Result<Vec<Output>> {
    let Some(dir) = results_dir else {
        return parse_all(args);
    };
    let outputs = if args.is_empty() {
        run_defaults()
            .into_iter()
            .map(|o| o.in_folder(dir))
            .collect()
    } else {
        args.iter()
            .map(|arg| {
                let output = Output::parse(arg)?;
                Ok(if gives_path(arg) {
                    output
                } else {
                    output.in_folder(dir)
                })
            })
            .collect::<Result<Vec<_>>>()?
    };
    refuse_shared_files(&outputs)?;
    Ok(outputs)
}

/// Whether an `--output` argument (one [`Output::parse`] takes) names its
/// file: a file name, or a `path` option.
fn gives_path(arg: &str) -> bool {
    let trimmed = arg.trim();
    if !trimmed.starts_with('{') && !trimmed.contains('=') {
        return !OUTPUT_KINDS.iter().any(|k| k.name == trimmed);
    }
    parse_kind_args(arg).is_ok_and(|args| args.options.contains_key("path"))
}

impl Output {
    /// A file output's path moved into `dir`.
    fn in_folder(mut self, dir: &Path) -> Output {
        match &mut self {
            Output::Console => {}
            Output::Csv(path)
            | Output::Html(path)
            | Output::Plot(path)
            | Output::Yaml { path, .. }
            | Output::Json { path, .. } => *path = dir.join(&*path),
        }
        self
    }
}

/// Refuses two outputs that write the same file (the second would replace
/// the first); paths are compared as written and, where the folder exists,
/// as resolved.
fn refuse_shared_files(outputs: &[Output]) -> Result<()> {
    let mut seen: Vec<(PathBuf, &Output)> = Vec::new();
    for output in outputs {
        let Some(path) = output.path() else {
            continue;
        };
        let key = resolved(path);
        if let Some((_, first)) = seen.iter().find(|(p, _)| *p == key) {
            return Err(Error::Flag {
                flag: "--output",
                reason: format!(
                    "kind={} and kind={} both write `{}`: the second would replace the \
                     first; give one of them another path",
                    first.kind().name,
                    output.kind().name,
                    path.display()
                ),
            });
        }
        seen.push((key, output));
    }
    Ok(())
}

/// `path` with its folder resolved where it exists (`./a.json` and
/// `a.json` are one file).
fn resolved(path: &Path) -> PathBuf {
    let folder = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    match (std::fs::canonicalize(folder), path.file_name()) {
        (Ok(folder), Some(name)) => folder.join(name),
        _ => path.to_owned(),
    }
}

/// Checks every output before anything runs (see
/// [`Output::check_writable`]).
///
/// # Errors
///
/// The first output that cannot be written.
pub fn check_all(outputs: &[Output]) -> Result<()> {
    outputs.iter().try_for_each(Output::check_writable)
}

/// What went wrong writing a run's outputs, and where the report went
/// instead.
#[derive(Debug)]
pub struct WriteFailed {
    /// Each output that could not be written, in order.
    pub failures: Vec<Error>,
    /// What the other outputs wrote (see [`Output::write`]).
    pub written: Vec<String>,
    /// When no JSON output holds the report: the fallback file it was
    /// written to instead, or why that failed too.
    pub fallback: Option<Result<PathBuf>>,
}

/// Writes the report to every output, each tried even when one before it
/// failed; when a file could not be written and no JSON output holds the
/// report, the report goes to a fallback file ([`write_fallback`]), so
/// that a run is never lost to its outputs. Returns what was written (see
/// [`Output::write`]).
///
/// # Errors
///
/// Every failure, and the fallback's outcome.
pub fn write_all_keeping(
    outputs: &[Output],
    report: &Report,
) -> Result<Vec<String>, Box<WriteFailed>> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    write_all_keeping_in(outputs, report, &[here, std::env::temp_dir()])
}

/// [`write_all_keeping`] with the fallback in the first of `folders` that
/// takes it.
fn write_all_keeping_in(
    outputs: &[Output],
    report: &Report,
    folders: &[PathBuf],
) -> Result<Vec<String>, Box<WriteFailed>> {
    let mut failures = Vec::new();
    let mut written = Vec::new();
    let mut json_written = false;
    for output in outputs {
        match output.write(report) {
            Ok(line) => {
                json_written |= matches!(output, Output::Json { .. });
                written.extend(line);
            }
            Err(err) => failures.push(err),
        }
    }
    if failures.is_empty() {
        return Ok(written);
    }
    let fallback = (!json_written).then(|| write_fallback_in(report, folders));
    Err(Box::new(WriteFailed {
        failures,
        written,
        fallback,
    }))
}

/// Writes the report as JSON to a file of its own,
/// `guidebench-report-<UTC time>.json`, in the current folder or, when that
/// fails, in the temporary folder; returns its path.
///
/// # Errors
///
/// [`Error::Output`] for the last place tried.
pub fn write_fallback(report: &Report) -> Result<PathBuf> {
    let here = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
    write_fallback_in(report, &[here, std::env::temp_dir()])
}

/// [`write_fallback`] into the first of `folders` that takes it.
fn write_fallback_in(report: &Report, folders: &[PathBuf]) -> Result<PathBuf> {
    let stamp = jiff::Timestamp::now()
        .strftime("%Y%m%dT%H%M%SZ")
        .to_string();
    let name = format!("guidebench-report-{stamp}-{}.json", std::process::id());
    let mut failed = Error::NoReport;
    for folder in folders {
        let path = folder.join(&name);
        match report.write_json(&path) {
            Ok(()) => return Ok(path),
            Err(source) => {
                failed = Error::Output {
                    writes: JSON.writes,
                    path,
                    source: Box::new(source),
                };
            }
        }
    }
    Err(failed)
}

/// A write failure as one line: what could not be written where, and the
/// operating system's reason (the innermost cause), without the framing of
/// the errors in between.
pub fn failure_message(err: &Error) -> String {
    let mut innermost: Option<&dyn std::error::Error> = None;
    let mut next = std::error::Error::source(err);
    while let Some(source) = next {
        innermost = Some(source);
        next = source.source();
    }
    match innermost {
        Some(cause) => format!("{err}: {cause}"),
        None => err.to_string(),
    }
}

/// Writes the report to every output, each tried even when one before it
/// failed; returns what was written (see [`Output::write`]).
///
/// # Errors
///
/// Every failure, in the order of `outputs`, and what was written.
pub fn write_all(
    outputs: &[Output],
    report: &Report,
) -> Result<Vec<String>, (Vec<Error>, Vec<String>)> {
    let mut failures = Vec::new();
    let mut written = Vec::new();
    for output in outputs {
        match output.write(report) {
            Ok(line) => written.extend(line),
            Err(err) => failures.push(err),
        }
    }
    if failures.is_empty() {
        Ok(written)
    } else {
        Err((failures, written))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::GUIDEBENCH_KEY;

    #[test]
    fn every_output_kind_builds_an_output_of_its_own_kind() {
        for kind in OUTPUT_KINDS {
            let arg = if kind.options.iter().any(|o| o.name == "path") {
                format!("kind={},path=out", kind.name)
            } else {
                format!("kind={}", kind.name)
            };
            let output = Output::parse(&arg).expect(kind.name);
            assert_eq!(output.kind().name, kind.name);
            assert!(!kind.description.is_empty() && !kind.writes.is_empty());
        }
        let names: Vec<&str> = OUTPUT_KINDS.iter().map(|k| k.name).collect();
        let mut sorted = names.clone();
        sorted.sort_unstable();
        assert_eq!(names, sorted, "sorted by name");
    }

    #[test]
    fn an_unknown_output_kind_is_a_usage_error_listing_the_known_kinds() {
        let err = Output::parse("kind=pdf,path=x").expect_err("unknown");
        assert!(err.is_usage(), "{err}");
        assert!(
            err.to_string()
                .contains("available: console, csv, html, json, plot, yaml"),
            "{err}"
        );
    }

    #[test]
    fn json_keeps_generated_text_only_when_asked() {
        let plain = Output::parse("kind=json,path=r.json").expect("json");
        let text = Output::parse("kind=json,path=r.json,include_text=true").expect("json");
        assert_eq!(
            (plain.wants_text(), text.wants_text()),
            (false, true),
            "{plain:?} {text:?}"
        );
    }

    #[test]
    fn a_file_name_picks_its_kind_and_a_kind_alone_writes_benchmarks_in_the_current_folder() {
        for (arg, kind) in [
            ("out.json", "json"),
            ("dir/out.CSV", "csv"),
            ("out.htm", "html"),
            ("out.yml", "yaml"),
            ("charts.png", "plot"),
        ] {
            let output = Output::parse(arg).expect(arg);
            assert_eq!(output.kind().name, kind, "{arg}");
            assert_eq!(output.path(), Some(Path::new(arg)), "{arg}");
        }
        for (arg, file) in [
            ("kind=json", "benchmarks.json"),
            ("json", "benchmarks.json"),
            ("kind=csv", "benchmarks.csv"),
            ("kind=html", "benchmarks.html"),
            ("kind=yaml", "benchmarks.yaml"),
            ("kind=plot", "benchmarks.png"),
        ] {
            let output = Output::parse(arg).expect(arg);
            assert_eq!(output.path(), Some(Path::new(file)), "{arg}");
        }
        assert_eq!(Output::parse("console").expect("console"), Output::Console);
        let err = Output::parse("out.json5").expect_err("no kind");
        assert!(err.is_usage(), "{err}");
        let err = err.to_string();
        assert!(!err.contains("kind=out.json5`?"), "{err}");
        assert!(err.contains("kind=NAME,path=out.json5"), "{err}");
    }

    #[test]
    fn an_output_in_a_missing_or_read_only_folder_is_refused_before_the_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let fine = Output::parse(&format!("{}/r.json", dir.path().display())).expect("json");
        fine.check_writable().expect("a folder that exists");
        assert_eq!(
            std::fs::read_dir(dir.path()).expect("list").count(),
            0,
            "the probe is removed"
        );
        let missing = dir.path().join("nodir").join("r.json");
        let err = Output::parse(&missing.display().to_string())
            .expect("json")
            .check_writable()
            .expect_err("no folder");
        assert!(err.is_usage(), "{err}");
        assert_eq!(
            err.to_string(),
            format!(
                "--output `{}`: the folder `{}` does not exist",
                missing.display(),
                dir.path().join("nodir").display()
            )
        );
        let folder = Output::Csv(dir.path().to_owned())
            .check_writable()
            .expect_err("a folder");
        assert!(folder.to_string().contains("it is a folder"), "{folder}");
        // A folder given as the path gets the kind's file inside it.
        let inside =
            Output::parse(&format!("kind=json,path={}", dir.path().display())).expect("json");
        assert_eq!(
            inside.path(),
            Some(dir.path().join("benchmarks.json").as_path())
        );
        let new_folder = Output::parse("kind=csv,path=results/").expect("csv");
        assert_eq!(new_folder.path(), Some(Path::new("results/benchmarks.csv")));
        assert!(Output::Console.check_writable().is_ok());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let locked = dir.path().join("locked");
            std::fs::create_dir(&locked).expect("mkdir");
            std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o500))
                .expect("chmod");
            // Root writes anywhere: the check is only meaningful for others.
            let writable_anyway = std::fs::write(locked.join("x"), b"").is_ok();
            let result = Output::Json {
                path: locked.join("r.json"),
                include_text: false,
                schema: Schema::Guidebench,
            }
            .check_writable();
            if writable_anyway {
                assert!(result.is_ok());
            } else {
                let err = result.expect_err("read-only folder");
                assert!(
                    err.to_string().contains("does not take a new file"),
                    "{err}"
                );
            }
        }
    }

    #[test]
    fn no_output_given_means_the_console_benchmarks_json_and_benchmarks_csv() {
        let outputs = parse_all(&[]).expect("defaults");
        let files: Vec<(&str, Option<&Path>)> =
            outputs.iter().map(|o| (o.kind().name, o.path())).collect();
        assert_eq!(
            files,
            [
                ("console", None),
                ("json", Some(Path::new("benchmarks.json"))),
                ("csv", Some(Path::new("benchmarks.csv"))),
            ]
        );
        assert!(matches!(
            outputs[1],
            Output::Json {
                schema: Schema::GuideLlm,
                include_text: false,
                ..
            }
        ));
        // --output replaces the defaults, as in GuideLLM.
        let given = parse_all(&["kind=html".to_owned()]).expect("html");
        assert_eq!(given, [Output::Html("benchmarks.html".into())]);
        let export: Vec<&str> = export_defaults().iter().map(|o| o.kind().name).collect();
        assert_eq!(export, ["console", "json", "html", "csv"]);
    }

    #[test]
    fn two_outputs_on_one_file_are_refused_before_the_run() {
        let dir = tempfile::tempdir().expect("tempdir");
        let a = dir.path().join("a.json");
        let dotted = dir.path().join(".").join("a.json");
        for (first, second) in [
            (
                format!("kind=json,path={}", a.display()),
                format!("kind=yaml,path={}", a.display()),
            ),
            (
                format!("kind=json,path={}", a.display()),
                format!("kind=json,path={}", dotted.display()),
            ),
            ("kind=csv".to_owned(), "benchmarks.csv".to_owned()),
        ] {
            let err = parse_all(&[first.clone(), second.clone()]).expect_err("one file");
            assert!(err.is_usage(), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("both write") && text.contains("the second would replace"),
                "{first} {second}: {text}"
            );
        }
        let fine = parse_all(&[
            format!("kind=json,path={}", a.display()),
            format!("kind=yaml,path={}", dir.path().join("a.yaml").display()),
            "console".to_owned(),
        ]);
        assert!(fine.is_ok(), "{fine:?}");
    }

    #[test]
    fn json_and_yaml_hold_guidellm_s_document_with_guidebench_s_report_inside() {
        let report = crate::report::tests::sample_report();
        let dir = tempfile::tempdir().expect("tempdir");
        let json = dir.path().join("r.json");
        let yaml = dir.path().join("r.yaml");
        let plain = dir.path().join("plain.json");
        let outputs = parse_all(&[
            format!("kind=json,path={}", json.display()),
            format!("kind=yaml,path={}", yaml.display()),
            format!("kind=json,schema=guidebench,path={}", plain.display()),
        ])
        .expect("outputs");
        let written = write_all(&outputs, &report).expect("written");
        assert_eq!(
            written[0],
            format!(
                "{} (JSON: GuideLLM's report with guidebench's, {} benchmarks)",
                json.display(),
                report.benchmarks.len()
            )
        );
        let document: Value =
            serde_json::from_str(&std::fs::read_to_string(&json).expect("json")).expect("parse");
        assert_eq!(document["metadata"]["version"], 2, "GuideLLM's schema");
        assert_eq!(
            document["benchmarks"].as_array().map(Vec::len),
            Some(report.benchmarks.len())
        );
        assert_eq!(
            document[GUIDEBENCH_KEY]["schema_version"],
            crate::report::SCHEMA_VERSION
        );
        let from_yaml: Value =
            serde_yaml_ng::from_str(&std::fs::read_to_string(&yaml).expect("yaml")).expect("yaml");
        assert_eq!(from_yaml, document, "the YAML holds the JSON's document");
        // Both read back as the very report that was written.
        assert_eq!(Report::read_json(&json).expect("read"), report);
        assert_eq!(Report::read_json(&yaml).expect("read YAML"), report);
        let own: Value =
            serde_json::from_str(&std::fs::read_to_string(&plain).expect("json")).expect("parse");
        assert!(
            own.get("metadata").is_none() && own["schema_version"] == 1,
            "guidebench's report alone"
        );
        let err = Output::parse("kind=json,schema=openai").expect_err("no such schema");
        assert!(err.to_string().contains("guidellm"), "{err}");
    }

    #[test]
    fn the_fallback_file_holds_the_whole_report() {
        let report = crate::report::tests::sample_report();
        let dir = tempfile::tempdir().expect("tempdir");
        let missing = dir.path().join("gone");
        let outputs = [
            Output::Csv(missing.join("r.csv")),
            Output::Json {
                path: missing.join("r.json"),
                include_text: false,
                schema: Schema::Guidebench,
            },
        ];
        let failed =
            write_all_keeping_in(&outputs, &report, &[missing.clone(), dir.path().to_owned()])
                .expect_err("the folder is gone");
        assert_eq!(failed.failures.len(), 2);
        let message = failure_message(&failed.failures[1]);
        assert!(
            message.starts_with(&format!(
                "cannot write the JSON report to {}: ",
                missing.join("r.json").display()
            )) && !message.contains("cannot read"),
            "{message}"
        );
        let kept = failed
            .fallback
            .expect("no JSON was written")
            .expect("written");
        assert_eq!(kept.parent(), Some(dir.path()), "the second folder");
        let back = Report::read_json(&kept).expect("a report");
        assert_eq!(back.benchmarks.len(), report.benchmarks.len());

        // A JSON output that was written holds the report: no fallback.
        let json = dir.path().join("r.json");
        let outputs = [
            Output::Csv(missing.join("r.csv")),
            Output::Json {
                path: json.clone(),
                include_text: false,
                schema: Schema::Guidebench,
            },
        ];
        let failed = write_all_keeping_in(&outputs, &report, &[dir.path().to_owned()])
            .expect_err("the CSV fails");
        assert!(failed.fallback.is_none());
        assert!(json.exists());
    }

    #[test]
    fn every_output_default_help_prints_is_the_one_parsing_applies() {
        let include_text = JSON.options.iter().find(|o| o.name == "include_text");
        assert_eq!(
            include_text.and_then(OptionSpec::default_text).as_deref(),
            Some("false")
        );
        let plain = Output::parse("kind=json,path=r.json").expect("json");
        assert_eq!(
            plain.wants_text(),
            JsonDefaults::default().include_text,
            "{plain:?}"
        );
    }
}
