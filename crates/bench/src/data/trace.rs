//! `--data kind=trace`: a recorded request trace, replayed with
//! `--profile kind=replay`.
//!
//! Each row of a JSONL, JSON or CSV file is one request: when it was sent
//! (`timestamp`), how long its prompt was (`input_length`, in tokens) and
//! how many tokens it generated (`output_length`). Rows are sorted by
//! timestamp; each item carries its offset from the first one
//! ([`DataItem::at`]), which the replay profile scales and follows.
//!
//! Two layouts are read:
//!
//! * plain traces: timestamps in seconds, prompts made of fresh synthetic
//!   text of exactly `input_length` tokens;
//! * Mooncake traces (rows with `hash_ids`, timestamps in milliseconds):
//!   each hash id is one block of `block_size` (512) tokens whose text is
//!   generated from the id alone, so equal ids give byte-identical blocks
//!   and prompts share exactly the blocks the trace recorded (what a prefix
//!   cache would reuse). The prompt is its blocks in order, cut at
//!   `input_length` tokens (the last block may be partial); if the blocks
//!   are shorter, fresh text unique to the request fills the rest.
//!
//! Guarantees, each held by a test below:
//!
//! * items come in timestamp order with offsets from the first timestamp
//!   (`rows_are_replayed_in_timestamp_order_with_offsets_from_the_first`);
//! * plain prompts count exactly `input_length` tokens
//!   (`plain_prompts_count_their_recorded_input_length`);
//! * equal hash ids give byte-identical blocks, different ids different
//!   ones (`mooncake_prompts_share_exactly_their_recorded_blocks`);
//! * a row without a timestamp or a length is an error that names its line
//!   (`a_row_without_a_timestamp_names_its_line`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use serde_json::{Map, Value};

use super::OnError;
use super::open::read_rows;
use super::rows::{Row, json_in_cell};
use super::synthetic::{Prompts, pseudo_word};
use super::{DataItem, DataSource, RowFault, seed_option, string_option, u32_option};
use crate::Result;
use guidebench_core::options::{OptionSpec, OptionType};
use guidebench_core::request::RequestInput;
use guidebench_core::rng;
use guidebench_core::sampling::SamplingParams;
use guidebench_core::tokenizer::Tokenizer;

/// The name of this data kind.
pub(super) const KIND: &str = "trace";

/// Tokens per hash id in Mooncake traces.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// The options of `--data kind=trace`.
pub const TRACE_OPTIONS: &[OptionSpec] = &[
    OptionSpec::optional(
        "path",
        OptionType::String,
        "the trace: JSONL, JSON or CSV, one request per row",
    )
    .required(),
    OptionSpec::optional(
        "format",
        OptionType::Choice(&["jsonl", "json", "csv"]),
        "the file format (default: from the extension)",
    ),
    OptionSpec::optional(
        "timestamp_column",
        OptionType::String,
        "when the request was sent",
    )
    .default_from::<TraceDefaults>(),
    OptionSpec::optional(
        "timestamp_unit",
        OptionType::Choice(&["s", "ms"]),
        "unit of the timestamps (default: ms for Mooncake traces, s otherwise)",
    ),
    OptionSpec::optional(
        "input_length_column",
        OptionType::String,
        "the prompt length in tokens",
    )
    .default_from::<TraceDefaults>(),
    OptionSpec::optional(
        "output_length_column",
        OptionType::String,
        "the number of tokens generated",
    )
    .default_from::<TraceDefaults>(),
    OptionSpec::optional(
        "hash_ids_column",
        OptionType::String,
        "Mooncake block hash ids: each one block of block_size tokens, equal ids equal text",
    )
    .default_from::<TraceDefaults>(),
    OptionSpec::optional("block_size", OptionType::Int, "tokens per hash id")
        .default_from::<TraceDefaults>(),
    OptionSpec::optional(
        "count",
        OptionType::Int,
        "replay only the first this many requests (in time order)",
    ),
    OptionSpec::optional(
        "seed",
        OptionType::Int,
        "seed of the prompt text (default: the run's seed)",
    ),
    super::ON_ERROR,
];

/// The defaults of [`TRACE_OPTIONS`] as [`TraceSource`] applies them;
/// keyed by option name.
#[derive(Debug, Serialize)]
struct TraceDefaults {
    timestamp_column: &'static str,
    input_length_column: &'static str,
    output_length_column: &'static str,
    hash_ids_column: &'static str,
    block_size: u32,
}

impl Default for TraceDefaults {
    fn default() -> Self {
        TraceDefaults {
            timestamp_column: "timestamp",
            input_length_column: "input_length",
            output_length_column: "output_length",
            hash_ids_column: "hash_ids",
            block_size: DEFAULT_BLOCK_SIZE,
        }
    }
}

/// One request of the trace, before its prompt is made.
#[derive(Debug, Clone)]
struct TraceRow {
    origin: String,
    timestamp: f64,
    input_length: u32,
    output_length: u32,
    hash_ids: Option<Vec<u64>>,
}

/// The text of hash-id blocks, made once per id.
struct Blocks {
    seed: u64,
    size: usize,
    /// Each id's token ids (exactly `size`) and their text.
    made: HashMap<u64, Vec<u32>>,
}

/// Mixed into the seed of block text, so that blocks do not repeat the
/// words of other synthetic streams of the same seed.
const BLOCK_SEED_MIX: u64 = 0x7472_6163_655f_6964;

impl Blocks {
    /// The token ids of block `id`: pseudo-words from a generator seeded by
    /// the run's seed and the id alone, each after a space, cut at `size`
    /// tokens.
    fn ids(&mut self, tokenizer: &dyn Tokenizer, id: u64) -> Result<&[u32]> {
        if !self.made.contains_key(&id) {
            let mut words = rng::seeded(self.seed ^ BLOCK_SEED_MIX, id);
            let mut text = String::new();
            let mut ids = Vec::new();
            // Each word is one token or more: `size` words always suffice,
            // and most tokenizers need far fewer; grow in steps.
            let step = self.size.div_ceil(4).max(8);
            while ids.len() <= self.size {
                for _ in 0..step {
                    text.push(' ');
                    text.push_str(&pseudo_word(&mut words));
                }
                ids = tokenizer.encode(&text, false)?;
            }
            ids.truncate(self.size);
            self.made.insert(id, ids);
        }
        Ok(self.made.get(&id).map_or(&[][..], Vec::as_slice))
    }
}

/// The rows of a trace, read and checked once, before the backend starts:
/// the rows that cannot be replayed first (kept only under
/// `on_error=skip`), then the others in time order.
#[derive(Debug)]
pub(super) struct TraceRows {
    entries: Vec<std::result::Result<TraceRow, RowFault>>,
    first: f64,
    unit_s: f64,
    block_size: u32,
    seed: u64,
}

/// `--data kind=trace`: the rows of a recorded trace, in time order, each
/// with its send offset.
pub struct TraceSource {
    rows: Arc<TraceRows>,
    next: usize,
    tokenizer: Arc<dyn Tokenizer>,
    prompts: Prompts,
    blocks: Blocks,
}

impl std::fmt::Debug for TraceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TraceSource")
            .field("rows", &self.rows.entries.len())
            .field("next", &self.next)
            .finish_non_exhaustive()
    }
}

/// A row's number in `column`: JSON numbers, or CSV text.
fn number(row: &Row, column: &str) -> Option<f64> {
    match row.fields.get(column)? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// A row's list of hash ids in `column`, if it has one.
fn hash_ids(row: &Row, column: &str) -> std::result::Result<Option<Vec<u64>>, String> {
    let list = match row.fields.get(column) {
        None | Some(Value::Null) => return Ok(None),
        Some(Value::Array(list)) => list.clone(),
        Some(Value::String(cell)) if row.csv => match json_in_cell(cell) {
            Some(Value::Array(list)) => list,
            _ => return Err(format!("`{column}` must be a JSON list of integers")),
        },
        Some(_) => return Err(format!("`{column}` must be a list of integers")),
    };
    list.iter()
        .map(|v| {
            v.as_u64()
                .ok_or_else(|| format!("`{column}` holds {v}, not a non-negative integer"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()
        .map(Some)
}

impl TraceRows {
    /// Reads the trace described by checked options (see
    /// [`TRACE_OPTIONS`]); `default_seed` where `seed` is absent.
    ///
    /// # Errors
    ///
    /// A file that cannot be read, and with `on_error=fail` the first row
    /// without a timestamp or a length (the message names the row).
    pub(super) fn read(
        context: &str,
        options: &Map<String, Value>,
        on_error: OnError,
        default_seed: u64,
    ) -> Result<Self> {
        let (path, rows, _) = read_rows(context, options)?;
        let d = TraceDefaults::default();
        let column = |key: &str, default: &'static str| {
            string_option(options, key).unwrap_or(default).to_string()
        };
        let timestamp = column("timestamp_column", d.timestamp_column);
        let input = column("input_length_column", d.input_length_column);
        let output = column("output_length_column", d.output_length_column);
        let hashes = column("hash_ids_column", d.hash_ids_column);
        let block_size = u32_option(context, options, "block_size", 1)?.unwrap_or(d.block_size);
        let seed = seed_option(options, default_seed);
        let (mut trace, mut faults) = (Vec::new(), Vec::new());
        for row in &rows {
            let origin = format!("{}, {}", path.display(), row.location);
            let invalid = |reason: String| RowFault {
                path: path.clone(),
                location: row.location.clone(),
                column: None,
                reason,
            };
            let parsed = (|| {
                if let Some(reason) = &row.bad {
                    return Err(invalid(reason.clone()));
                }
                let length = |name: &str| {
                    number(row, name)
                        .filter(|n| n.fract() == 0.0 && *n >= 0.0 && *n <= f64::from(u32::MAX))
                        .map(|n| n as u32)
                        .ok_or_else(|| invalid(format!("no whole number of tokens in `{name}`")))
                };
                Ok(TraceRow {
                    timestamp: number(row, &timestamp)
                        .filter(|t| t.is_finite())
                        .ok_or_else(|| invalid(format!("no number in `{timestamp}`")))?,
                    input_length: length(&input)?,
                    output_length: length(&output)?.max(1),
                    hash_ids: hash_ids(row, &hashes).map_err(invalid)?,
                    origin,
                })
            })();
            match parsed {
                Ok(row) => trace.push(row),
                Err(fault) if on_error == OnError::Skip => faults.push(fault),
                Err(fault) => return Err(fault.error()),
            }
        }
        // In time order; rows recorded at the same time keep theirs.
        trace.sort_by(|a, b| a.timestamp.total_cmp(&b.timestamp));
        if let Some(count) = u32_option(context, options, "count", 0)? {
            trace.truncate(count as usize);
        }
        let mooncake = trace.iter().any(|row| row.hash_ids.is_some());
        let unit_s = match string_option(options, "timestamp_unit") {
            Some("ms") => 1e-3,
            Some(_) => 1.0,
            None if mooncake => 1e-3,
            None => 1.0,
        };
        let first = trace.first().map_or(0.0, |row| row.timestamp);
        let entries = faults
            .into_iter()
            .map(Err)
            .chain(trace.into_iter().map(Ok))
            .collect();
        Ok(TraceRows {
            entries,
            first,
            unit_s,
            block_size,
            seed,
        })
    }
}

impl TraceSource {
    /// A source over rows read by [`TraceRows::read`], making prompts
    /// through `tokenizer`.
    pub(super) fn new(rows: Arc<TraceRows>, tokenizer: Arc<dyn Tokenizer>) -> Self {
        TraceSource {
            prompts: Prompts::new(Arc::clone(&tokenizer), rows.seed),
            blocks: Blocks {
                seed: rows.seed,
                size: rows.block_size as usize,
                made: HashMap::new(),
            },
            rows,
            next: 0,
            tokenizer,
        }
    }

    /// The prompt of a Mooncake row: its blocks in order, cut at `tokens`,
    /// then fresh text if the blocks are shorter.
    fn block_prompt(&mut self, hash_ids: &[u64], tokens: usize) -> Result<String> {
        let mut text = String::new();
        let mut left = tokens;
        for &id in hash_ids {
            if left == 0 {
                break;
            }
            let ids = self.blocks.ids(self.tokenizer.as_ref(), id)?;
            let take = left.min(ids.len());
            text.push_str(&self.tokenizer.decode(&ids[..take], false)?);
            left -= take;
        }
        if left > 0 {
            text.push(' ');
            text.push_str(&self.prompts.prompt(left)?);
        }
        Ok(text)
    }
}

impl DataSource for TraceSource {
    fn next_item(&mut self) -> Result<Option<DataItem>> {
        let rows = Arc::clone(&self.rows);
        let Some(entry) = rows.entries.get(self.next) else {
            return Ok(None);
        };
        self.next += 1;
        let row = match entry {
            Ok(row) => row,
            Err(fault) => return Err(fault.error()),
        };
        let tokens = row.input_length as usize;
        let text = match &row.hash_ids {
            Some(ids) => self.block_prompt(ids, tokens)?,
            None => self.prompts.prompt(tokens.max(1))?,
        };
        let count = self.tokenizer.count(&text)?;
        let at = Duration::try_from_secs_f64((row.timestamp - rows.first) * rows.unit_s)
            .unwrap_or(Duration::ZERO);
        Ok(Some(DataItem {
            input: RequestInput::Text(text),
            prompt_tokens: Some(u32::try_from(count).unwrap_or(u32::MAX)),
            output_tokens: Some(row.output_length),
            sampling: SamplingParams::default(),
            origin: row.origin.clone(),
            at: Some(at),
            turns: Vec::new(),
            history: super::History::Full,
            tools: None,
        }))
    }

    fn len_hint(&self) -> Option<usize> {
        let left = self.rows.entries.get(self.next..).unwrap_or_default();
        Some(left.iter().filter(|entry| entry.is_ok()).count())
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};

    use super::*;
    use crate::data::create_source;
    use guidebench_core::options::parse_kind_args;
    use guidebench_testkit::ByteTokenizer;

    fn write(dir: &Path, name: &str, content: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, content).expect("write");
        path
    }

    fn open(path: &Path, extra: &str) -> Result<Box<dyn DataSource>> {
        let args = parse_kind_args(&format!("kind=trace,path={}{extra}", path.display()))?;
        create_source(args, Arc::new(ByteTokenizer::default()), 7)
    }

    fn all(source: &mut dyn DataSource) -> Vec<DataItem> {
        std::iter::from_fn(|| source.next_item().expect("item")).collect()
    }

    fn text(item: &DataItem) -> &str {
        match &item.input {
            RequestInput::Text(text) => text,
            RequestInput::Chat(_) => panic!("a text prompt"),
        }
    }

    #[test]
    fn rows_are_replayed_in_timestamp_order_with_offsets_from_the_first() {
        let dir = tempfile::tempdir().expect("dir");
        let path = write(
            dir.path(),
            "t.jsonl",
            "{\"timestamp\": 12.5, \"input_length\": 5, \"output_length\": 3}\n\
             {\"timestamp\": 10.0, \"input_length\": 7, \"output_length\": 2}\n\
             {\"timestamp\": 10.25, \"input_length\": 9, \"output_length\": 4}\n",
        );
        let items = all(open(&path, "").expect("source").as_mut());
        let at: Vec<Option<Duration>> = items.iter().map(|i| i.at).collect();
        assert_eq!(
            at,
            vec![
                Some(Duration::ZERO),
                Some(Duration::from_millis(250)),
                Some(Duration::from_millis(2_500)),
            ]
        );
        let lengths: Vec<(Option<u32>, Option<u32>)> = items
            .iter()
            .map(|i| (i.prompt_tokens, i.output_tokens))
            .collect();
        assert_eq!(
            lengths,
            vec![(Some(7), Some(2)), (Some(9), Some(4)), (Some(5), Some(3))]
        );
        let csv = write(
            dir.path(),
            "t.csv",
            "timestamp,input_length,output_length\n1000,4,1\n1500,4,1\n",
        );
        let items = all(open(&csv, ",timestamp_unit=ms").expect("csv").as_mut());
        assert_eq!(items[1].at, Some(Duration::from_millis(500)));
    }

    #[test]
    fn plain_prompts_count_their_recorded_input_length() {
        let dir = tempfile::tempdir().expect("dir");
        let path = write(
            dir.path(),
            "t.jsonl",
            "{\"timestamp\": 0, \"input_length\": 37, \"output_length\": 3}\n\
             {\"timestamp\": 1, \"input_length\": 120, \"output_length\": 3}\n",
        );
        let items = all(open(&path, "").expect("source").as_mut());
        assert_eq!(text(&items[0]).len(), 37);
        assert_eq!(text(&items[1]).len(), 120);
        assert_ne!(text(&items[0]), &text(&items[1])[..37]);
    }

    #[test]
    fn mooncake_prompts_share_exactly_their_recorded_blocks() {
        let dir = tempfile::tempdir().expect("dir");
        // Mooncake rows: timestamps in ms, 512-token blocks; the second
        // request repeats blocks 1 and 2 and adds 3 (partial); the third
        // shares only block 1.
        let path = write(
            dir.path(),
            "mooncake.jsonl",
            "{\"timestamp\": 0, \"input_length\": 1024, \"output_length\": 8, \"hash_ids\": [1, 2]}\n\
             {\"timestamp\": 1500, \"input_length\": 1300, \"output_length\": 8, \"hash_ids\": [1, 2, 3]}\n\
             {\"timestamp\": 3000, \"input_length\": 1024, \"output_length\": 8, \"hash_ids\": [1, 4]}\n",
        );
        let items = all(open(&path, "").expect("source").as_mut());
        assert_eq!(items[1].at, Some(Duration::from_millis(1_500)));
        let (a, b, c) = (text(&items[0]), text(&items[1]), text(&items[2]));
        // The byte tokenizer makes one token of each byte: blocks are 512
        // bytes, the last block cut to the input length.
        assert_eq!((a.len(), b.len(), c.len()), (1024, 1300, 1024));
        assert_eq!(items[1].prompt_tokens, Some(1300));
        assert_eq!(&a[..1024], &b[..1024], "blocks 1 and 2 are byte-identical");
        assert_eq!(&a[..512], &c[..512], "block 1 is byte-identical");
        assert_ne!(&a[512..1024], &c[512..1024], "blocks 2 and 4 differ");
        // The same trace gives the same text again.
        let again = all(open(&path, "").expect("source").as_mut());
        assert_eq!(text(&again[1]), b);
    }

    #[test]
    fn every_trace_default_help_prints_is_the_one_parsing_applies() {
        let shown = |name: &str| {
            TRACE_OPTIONS
                .iter()
                .find(|o| o.name == name)
                .and_then(OptionSpec::default_text)
        };
        assert_eq!(shown("timestamp_column").as_deref(), Some("timestamp"));
        assert_eq!(shown("block_size").as_deref(), Some("512"));

        // Rows under the columns help names, read with no options.
        let dir = tempfile::tempdir().expect("dir");
        let path = write(
            dir.path(),
            "t.jsonl",
            "{\"timestamp\": 5, \"input_length\": 9, \"output_length\": 2, \"hash_ids\": [7]}\n",
        );
        let mut options = Map::new();
        options.insert("path".into(), Value::from(path.display().to_string()));
        let rows = TraceRows::read("data trace", &options, OnError::Fail, 7).expect("rows");
        let source = TraceSource::new(Arc::new(rows), Arc::new(ByteTokenizer::default()));
        let d = TraceDefaults::default();
        assert_eq!(source.blocks.size, d.block_size as usize);
        let row = source.rows.entries[0].as_ref().expect("one row");
        assert_eq!(
            (row.timestamp, row.input_length, row.output_length),
            (5.0, 9, 2)
        );
        assert_eq!(row.hash_ids.as_deref(), Some(&[7][..]));
    }

    #[test]
    fn a_row_without_a_timestamp_names_its_line() {
        let dir = tempfile::tempdir().expect("dir");
        let path = write(
            dir.path(),
            "t.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 3}\n\
             {\"input_length\": 5, \"output_length\": 3}\n",
        );
        let err = open(&path, "").err().expect("no timestamp").to_string();
        assert!(err.contains("line 2") && err.contains("timestamp"), "{err}");
        let err = open(&path, ",input_length_column=prompt_len")
            .err()
            .expect("no such column")
            .to_string();
        assert!(
            err.contains("line 1") && err.contains("prompt_len"),
            "{err}"
        );
    }

    #[test]
    fn with_on_error_skip_a_bad_trace_row_is_yielded_as_its_error_and_the_rest_replay() {
        let dir = tempfile::tempdir().expect("dir");
        let path = write(
            dir.path(),
            "t.jsonl",
            "{\"timestamp\": 0, \"input_length\": 5, \"output_length\": 3}\n\
             {\"input_length\": 5, \"output_length\": 3}\n\
             {\"timestamp\": 1, oops}\n\
             {\"timestamp\": 2, \"input_length\": 4, \"output_length\": 2}\n",
        );
        let mut source = open(&path, ",on_error=skip").expect("skip keeps the bad rows");
        assert_eq!(source.len_hint(), Some(2), "two rows replay");
        let mut errors = Vec::new();
        let mut lengths = Vec::new();
        loop {
            match source.next_item() {
                Ok(Some(item)) => lengths.push(item.prompt_tokens),
                Ok(None) => break,
                Err(err) => {
                    assert!(crate::data::is_item_error(&err), "{err}");
                    errors.push(err.to_string());
                }
            }
        }
        assert_eq!(lengths, [Some(5), Some(4)]);
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("line 2"), "{errors:?}");
        assert!(errors[1].contains("line 3"), "{errors:?}");
    }
}
