//! `--output kind=…`: where a report goes.

use std::path::PathBuf;

use anyhow::{Context, anyhow};
use guidebench_bench::report::{
    Report, console_summary, write_csv, write_html, write_plot, write_yaml,
};
use guidebench_core::options::{KindArgs, OptionSpec, OptionType, check_options, parse_kind_args};

/// Every output kind with its options, for help and checks.
pub const OUTPUT_KINDS: &[(&str, &[OptionSpec])] = &[
    ("console", &[]),
    (
        "csv",
        &[OptionSpec::optional("path", OptionType::String, "file to write").required()],
    ),
    (
        "html",
        &[OptionSpec::optional("path", OptionType::String, "file to write").required()],
    ),
    (
        "json",
        &[
            OptionSpec::optional("path", OptionType::String, "file to write").required(),
            OptionSpec::optional(
                "include_text",
                OptionType::Bool,
                "keep each request's generated text",
            )
            .with_default("false"),
        ],
    ),
    (
        "plot",
        &[OptionSpec::optional("path", OptionType::String, "PNG file to write").required()],
    ),
    (
        "yaml",
        &[OptionSpec::optional("path", OptionType::String, "file to write").required()],
    ),
];

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
    pub fn parse(arg: &str) -> Result<Output, guidebench_core::Error> {
        Output::from_args(parse_kind_args(arg)?)
    }

    fn from_args(mut args: KindArgs) -> Result<Output, guidebench_core::Error> {
        let Some((_, specs)) = OUTPUT_KINDS.iter().find(|(k, _)| *k == args.kind) else {
            return Err(guidebench_core::Error::UnknownName {
                what: "output kind",
                name: args.kind,
                available: OUTPUT_KINDS.iter().map(|(k, _)| (*k).to_owned()).collect(),
            });
        };
        check_options(
            &format!("output {}", args.kind),
            &[specs],
            &mut args.options,
        )?;
        let path = || {
            PathBuf::from(
                args.options
                    .get("path")
                    .and_then(serde_json::Value::as_str)
                    .unwrap_or_default(),
            )
        };
        Ok(match args.kind.as_str() {
            "console" => Output::Console,
            "csv" => Output::Csv(path()),
            "html" => Output::Html(path()),
            "plot" => Output::Plot(path()),
            "yaml" => Output::Yaml(path()),
            _ => Output::Json {
                path: path(),
                include_text: args
                    .options
                    .get("include_text")
                    .and_then(serde_json::Value::as_bool)
                    .unwrap_or(false),
            },
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

    /// Writes the report.
    pub fn write(&self, report: &Report) -> anyhow::Result<()> {
        match self {
            Output::Console => {
                print!("{}", console_summary(report));
                Ok(())
            }
            Output::Csv(path) => write_csv(report, path)
                .with_context(|| format!("cannot write the CSV report to {}", path.display())),
            Output::Html(path) => write_html(report, path)
                .with_context(|| format!("cannot write the HTML report to {}", path.display())),
            Output::Plot(path) => write_plot(report, path)
                .with_context(|| format!("cannot write the chart image to {}", path.display())),
            Output::Yaml(path) => write_yaml(report, path)
                .with_context(|| format!("cannot write the YAML report to {}", path.display())),
            Output::Json { path, .. } => report
                .write_json(path)
                .with_context(|| format!("cannot write the JSON report to {}", path.display())),
        }
    }
}

/// Parses every `--output`, defaulting to the console.
pub fn parse_all(args: &[String]) -> Result<Vec<Output>, guidebench_core::Error> {
    if args.is_empty() {
        return Ok(vec![Output::Console]);
    }
    args.iter().map(|a| Output::parse(a)).collect()
}

/// Writes the report to every output; the first failure is returned after
/// the others were tried.
pub fn write_all(outputs: &[Output], report: &Report) -> anyhow::Result<()> {
    let mut first_error = None;
    for output in outputs {
        if let Err(err) = output.write(report) {
            eprintln!("error: {err:#}");
            first_error.get_or_insert(err);
        }
    }
    first_error.map_or(Ok(()), |err| Err(anyhow!(err)))
}
