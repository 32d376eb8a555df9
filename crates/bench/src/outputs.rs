//! `--output kind=…`: where a report goes.
//!
//! [`OUTPUT_KINDS`] is the one list of output kinds: each kind's name,
//! description, what it writes, its keys, and how its options become an
//! [`Output`]. Help, checks and construction all come from it; an unknown
//! kind is a usage error that lists the known ones, and nothing falls back
//! to a default kind.

use std::path::PathBuf;

use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options, parse_kind_args};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::report::{Report, console_summary, write_csv, write_html, write_plot, write_yaml};
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

const PATH: OptionSpec =
    OptionSpec::optional("path", OptionType::String, "file to write").required();

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
    options: &[PATH],
    build: |options| Output::Csv(path(options)),
};

/// `kind=html`.
const HTML: OutputKind = OutputKind {
    name: "html",
    description: "a self-contained HTML page",
    writes: "the HTML report",
    options: &[PATH],
    build: |options| Output::Html(path(options)),
};

/// `kind=json`.
const JSON: OutputKind = OutputKind {
    name: "json",
    description: "the whole report, per-request records included",
    writes: "the JSON report",
    options: &[
        PATH,
        OptionSpec::optional(
            "include_text",
            OptionType::Bool,
            "keep each request's generated text",
        )
        .default_from::<JsonDefaults>(),
    ],
    build: |options| Output::Json {
        path: path(options),
        include_text: options
            .get("include_text")
            .and_then(Value::as_bool)
            .unwrap_or(JsonDefaults::default().include_text),
    },
};

/// The defaults of `kind=json`'s options, as [`Output::parse`] applies
/// them; keyed by option name.
#[derive(Debug, Default, Serialize)]
struct JsonDefaults {
    include_text: bool,
}

/// `kind=plot`.
const PLOT: OutputKind = OutputKind {
    name: "plot",
    description: "the main charts as a PNG image",
    writes: "the chart image",
    options: &[OptionSpec::optional("path", OptionType::String, "PNG file to write").required()],
    build: |options| Output::Plot(path(options)),
};

/// `kind=yaml`.
const YAML: OutputKind = OutputKind {
    name: "yaml",
    description: "the JSON report as YAML",
    writes: "the YAML report",
    options: &[PATH],
    build: |options| Output::Yaml(path(options)),
};

/// Every output kind, sorted by name.
pub const OUTPUT_KINDS: &[OutputKind] = &[CONSOLE, CSV, HTML, JSON, PLOT, YAML];

/// The `path` option, which the checks made present for every kind that
/// requires it.
fn path(options: &Map<String, Value>) -> PathBuf {
    PathBuf::from(
        options
            .get("path")
            .and_then(Value::as_str)
            .unwrap_or_default(),
    )
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
    /// The JSON report as YAML.
    Yaml(PathBuf),
    /// The whole report, per-request records included.
    Json {
        /// Where.
        path: PathBuf,
        /// Keep generated text in the records.
        include_text: bool,
    },
}

impl Output {
    /// Parses one `--output` argument.
    ///
    /// # Errors
    ///
    /// A malformed argument, an unknown kind (the error lists the known
    /// ones), or an unknown, missing or mistyped key.
    pub fn parse(arg: &str) -> Result<Output> {
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
            Output::Yaml(_) => &YAML,
            Output::Json { .. } => &JSON,
        }
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

    /// Writes the report.
    ///
    /// # Errors
    ///
    /// [`Error::Output`], naming what could not be written where, and why.
    pub fn write(&self, report: &Report) -> Result<()> {
        let (path, result) = match self {
            Output::Console => {
                print!("{}", console_summary(report));
                return Ok(());
            }
            Output::Csv(path) => (path, write_csv(report, path).map_err(Error::from)),
            Output::Html(path) => (path, write_html(report, path)),
            Output::Plot(path) => (path, write_plot(report, path)),
            Output::Yaml(path) => (path, write_yaml(report, path)),
            Output::Json { path, .. } => (path, report.write_json(path)),
        };
        result.map_err(|source| Error::Output {
            writes: self.kind().writes,
            path: path.clone(),
            source: Box::new(source),
        })
    }
}

/// Parses every `--output`, defaulting to the console.
///
/// # Errors
///
/// The first argument [`Output::parse`] refuses.
pub fn parse_all(args: &[String]) -> Result<Vec<Output>> {
    if args.is_empty() {
        return Ok(vec![Output::Console]);
    }
    args.iter().map(|a| Output::parse(a)).collect()
}

/// Writes the report to every output, each tried even when one before it
/// failed.
///
/// # Errors
///
/// Every failure, in the order of `outputs`.
pub fn write_all(outputs: &[Output], report: &Report) -> Result<(), Vec<Error>> {
    let failures: Vec<Error> = outputs
        .iter()
        .filter_map(|output| output.write(report).err())
        .collect();
    if failures.is_empty() {
        Ok(())
    } else {
        Err(failures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(parse_all(&[]).expect("default"), [Output::Console]);
    }

    #[test]
    fn every_output_default_help_prints_is_the_one_parsing_applies() {
        for kind in OUTPUT_KINDS {
            for spec in kind.options.iter().filter(|o| o.default.is_some()) {
                assert!(
                    spec.default_text().is_some(),
                    "`{}` of kind={} names a default its struct does not have",
                    spec.name,
                    kind.name
                );
            }
        }
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
