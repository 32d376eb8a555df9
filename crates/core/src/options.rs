//! The `kind=NAME,key=value,...` option grammar shared by every pluggable
//! option (`--backend`, `--data`, `--profile`, `--constraint`, `--output`).
//!
//! An argument is either a comma-separated list of `key=value` pairs, one of
//! which is `kind=NAME`, or a JSON object with a string `kind` field.
//!
//! In the `key=value` form values are typed:
//!
//! * `true` / `false` become booleans;
//! * integers become integer numbers, and `0.5` or `1e-3` floating numbers;
//! * a value starting with `{`, `[` or `"` is parsed as JSON;
//! * `a;b;c` becomes a list whose items are typed the same way;
//! * anything else, and an empty value, stays text.
//!
//! Commas inside JSON brackets, braces and double-quoted strings do not
//! split, and dotted keys (`engine_args.threads=2`) nest into objects.
//!
//! [`check_options`] then validates the parsed options against a
//! component's [`OptionSpec`]s and normalises them, after which
//! [`from_map`] turns them into a typed struct.

use std::collections::HashSet;

use serde_json::{Map, Number, Value};

use crate::split::{LeftOpen, split_outside_json};
use crate::{Error, Result};

/// The type an option's value must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum OptionType {
    /// A whole number.
    Int,
    /// A number.
    Float,
    /// `true` or `false`.
    Bool,
    /// Any text; numbers and booleans are taken as their text.
    String,
    /// A duration: seconds as a number, or text with a unit (`10ms`, `1.5s`).
    /// Normalised to seconds (a number). For the lengths of runs and
    /// waits, given in seconds as GuideLLM gives them (`seconds=30`,
    /// `rampup=5`, `timeout=300`).
    Duration,
    /// A latency: text with its unit (`200ms`, `0.2s`); a bare number other
    /// than 0 is refused as ambiguous (milliseconds or seconds?).
    /// Normalised to seconds (a number). For the times of one request or
    /// one step (`--slo ttft=200ms`, the mock engine's `token_time=5ms`).
    Latency,
    /// A list (`a;b;c` or a JSON array); a single value becomes a one-item list.
    List,
    /// A nested object (dotted keys or JSON).
    Object,
    /// One of the given words.
    Choice(&'static [&'static str]),
    /// Anything.
    Any,
}

/// The schema of one option.
///
/// Its default is not written here as text: [`default_from`] names the
/// typed options struct the code reads the option into, and help prints
/// that struct's `Default`, so the value used and the value shown have one
/// source.
///
/// [`default_from`]: OptionSpec::default_from
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OptionSpec {
    /// The key.
    pub name: &'static str,
    /// The value's type.
    pub ty: OptionType,
    /// One line of help.
    pub description: &'static str,
    /// Where the default comes from, if the option has one.
    pub default: Option<DefaultOf>,
    /// Whether the option must be given.
    pub required: bool,
}

/// Where an option's default comes from: the field of the option's name in
/// the serialized `Default` of a typed options struct (see
/// [`OptionSpec::default_from`]).
#[derive(Clone, Copy)]
pub struct DefaultOf {
    /// The struct's name, for `Debug` and equality.
    source: fn() -> &'static str,
    /// The field named `key` of the struct's serialized default.
    field: fn(&str) -> Option<Value>,
}

impl DefaultOf {
    /// The typed default of `key`, serialized; `None` when the struct's
    /// default leaves it unset (`null`) or has no such field.
    #[must_use]
    pub fn value(&self, key: &str) -> Option<Value> {
        (self.field)(key)
    }
}

impl std::fmt::Debug for DefaultOf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DefaultOf({})", (self.source)())
    }
}

impl PartialEq for DefaultOf {
    fn eq(&self, other: &Self) -> bool {
        (self.source)() == (other.source)()
    }
}

impl Eq for DefaultOf {}

/// The field `key` of `T::default()` serialized, unless it is `null`.
fn field_of_default<T: serde::Serialize + Default>(key: &str) -> Option<Value> {
    match serde_json::to_value(T::default()) {
        Ok(Value::Object(mut fields)) => fields.remove(key).filter(|v| !v.is_null()),
        _ => None,
    }
}

impl OptionSpec {
    /// An optional option.
    #[must_use]
    pub const fn optional(name: &'static str, ty: OptionType, description: &'static str) -> Self {
        OptionSpec {
            name,
            ty,
            description,
            default: None,
            required: false,
        }
    }

    /// The same option, whose default is the field of the same name (as
    /// serialized) in `T::default()`: `T` is the typed options struct the
    /// code reads the option into and takes its unset values from, so help
    /// shows the value the code uses. A field left `None` shows no default.
    #[must_use]
    pub const fn default_from<T: serde::Serialize + Default>(mut self) -> Self {
        self.default = Some(DefaultOf {
            source: std::any::type_name::<T>,
            field: field_of_default::<T>,
        });
        self
    }

    /// The typed default, serialized (`None` when there is none).
    #[must_use]
    pub fn default_value(&self) -> Option<Value> {
        self.default.and_then(|d| d.value(self.name))
    }

    /// The default as help prints it: text as it is, numbers and booleans
    /// as written (a whole float without `.0`), lists joined with commas;
    /// `None` when there is none.
    #[must_use]
    pub fn default_text(&self) -> Option<String> {
        self.default_value().map(|value| value_text(&value))
    }

    /// The same option with another line of help (an engine's own words
    /// for a shared option, say).
    #[must_use]
    pub const fn with_description(mut self, description: &'static str) -> Self {
        self.description = description;
        self
    }

    /// The same option, required.
    #[must_use]
    pub const fn required(mut self) -> Self {
        self.required = true;
        self
    }
}

/// A value as help prints it (see [`OptionSpec::default_text`]).
fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        // A whole float as a user writes it: `0`, not `0.0`.
        Value::Number(n) if !n.is_i64() && !n.is_u64() => match n.as_f64() {
            Some(x) if x.fract() == 0.0 && x.abs() < 1e15 => format!("{x:.0}"),
            _ => n.to_string(),
        },
        Value::Array(items) => items.iter().map(value_text).collect::<Vec<_>>().join(","),
        other => other.to_string(),
    }
}

/// Serializes a duration as help and reports show one: whole seconds as
/// `30s`, whole milliseconds below a second as `10ms`, else seconds
/// (`1.5s`). For a typed
/// options struct's `Duration` fields (`#[serde(serialize_with = ...)]`),
/// so their defaults print as a user writes them.
///
/// # Errors
///
/// Those of the serializer.
pub fn serialize_duration<S: serde::Serializer>(
    duration: &std::time::Duration,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    serializer.serialize_str(&duration_text(*duration))
}

/// Serializes seconds held as a number the way [`serialize_duration`]
/// does (`0s`, `10ms`, `1.5s`), for typed options that keep a duration as
/// `f64` seconds. A value that is not a finite, non-negative duration is
/// serialized as the number.
///
/// # Errors
///
/// Those of the serializer.
pub fn serialize_seconds<S: serde::Serializer>(
    seconds: &f64,
    serializer: S,
) -> std::result::Result<S::Ok, S::Error> {
    match std::time::Duration::try_from_secs_f64(*seconds) {
        Ok(duration) => serializer.serialize_str(&duration_text(duration)),
        Err(_) => serializer.serialize_f64(*seconds),
    }
}

/// A duration as a user writes it (see [`serialize_duration`]).
#[must_use]
pub fn duration_text(duration: std::time::Duration) -> String {
    if duration.subsec_nanos() == 0 {
        format!("{}s", duration.as_secs())
    } else if duration.as_secs() == 0 && duration.subsec_nanos().is_multiple_of(1_000_000) {
        format!("{}ms", duration.as_millis())
    } else {
        format!("{}s", duration.as_secs_f64())
    }
}

/// A parsed `kind=NAME,key=value,...` argument.
#[derive(Debug, Clone, PartialEq)]
pub struct KindArgs {
    /// The `kind`.
    pub kind: String,
    /// Every other key, typed, dotted keys nested.
    pub options: Map<String, Value>,
}

/// The key that names the component.
const KIND: &str = "kind";

/// The reason given when no `kind` is present.
const MISSING_KIND: &str =
    "missing `kind`: `kind=NAME` is required, as in `kind=NAME,key=value,...`";

/// Parses `kind=NAME,key=value,...` or a JSON object with a `kind` field.
///
/// # Errors
///
/// [`Error::MalformedArgument`] when the input is empty, a segment has no
/// `=` or an empty key, a key is given twice or both as a value and as the
/// parent of a dotted key, a JSON value is invalid, or `kind` is missing or
/// not a non-empty name.
pub fn parse_kind_args(input: &str) -> Result<KindArgs> {
    let malformed = |reason: String| Error::MalformedArgument {
        // Errors are printed: the input's secrets are not.
        input: crate::redact::redact_kind_arg(input),
        reason,
    };
    let trimmed = input.trim();
    if trimmed.is_empty() {
        return Err(malformed(
            "the argument is empty; expected `kind=NAME,key=value,...` or a JSON object"
                .to_string(),
        ));
    }
    if trimmed.starts_with('{') {
        parse_json_form(trimmed).map_err(malformed)
    } else {
        parse_pairs_form(trimmed).map_err(malformed)
    }
}

/// Parses the JSON-object form of an argument.
fn parse_json_form(text: &str) -> std::result::Result<KindArgs, String> {
    let value: Value =
        serde_json::from_str(text).map_err(|e| format!("invalid JSON object: {e}"))?;
    let Value::Object(mut options) = value else {
        return Err("expected a JSON object".to_string());
    };
    let kind = match options.remove(KIND) {
        None => return Err(MISSING_KIND.to_string()),
        Some(Value::String(kind)) if !kind.trim().is_empty() => kind.trim().to_string(),
        Some(other) => {
            return Err(format!(
                "`kind` must be a non-empty string, got {}",
                show_value(&other)
            ));
        }
    };
    Ok(KindArgs { kind, options })
}

/// One part of a key: a name (`streams`), or an index into a list
/// (`streams[0]` is the name `streams`, then the index 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part<'a> {
    Name(&'a str),
    Index(usize),
}

/// The largest list index a key may give (`streams[9999]`): an index sizes
/// the list, so it must stay small.
const MAX_INDEX: usize = 9_999;

/// Splits a dotted key into its parts: `items[0].weight` is `items`, 0,
/// `weight`. A dotted part that is not `name[digits]` is a name as written.
fn key_parts(key: &str) -> std::result::Result<Vec<Part<'_>>, String> {
    let mut parts = Vec::new();
    for part in key.split('.').map(str::trim) {
        if part.is_empty() {
            return Err(format!("key `{key}` has an empty part between dots"));
        }
        let indexed = part
            .strip_suffix(']')
            .and_then(|p| p.split_once('['))
            .filter(|(name, index)| {
                !name.is_empty()
                    && !name.contains(['[', ']'])
                    && !index.is_empty()
                    && index.bytes().all(|b| b.is_ascii_digit())
            });
        match indexed {
            Some((name, index)) => {
                let index = index
                    .parse::<usize>()
                    .ok()
                    .filter(|i| *i <= MAX_INDEX)
                    .ok_or_else(|| {
                        format!("key `{key}`: a list index must be at most {MAX_INDEX}")
                    })?;
                parts.push(Part::Name(name.trim()));
                parts.push(Part::Index(index));
            }
            None => parts.push(Part::Name(part)),
        }
    }
    Ok(parts)
}

/// The key that `parts` spell, as a user would write it (`items[0].weight`).
fn key_text(parts: &[Part<'_>]) -> String {
    let mut text = String::new();
    for part in parts {
        match part {
            Part::Name(name) => {
                if !text.is_empty() {
                    text.push('.');
                }
                text.push_str(name);
            }
            Part::Index(i) => {
                let _ = std::fmt::Write::write_fmt(&mut text, format_args!("[{i}]"));
            }
        }
    }
    text
}

/// Parses the `kind=NAME,key=value,...` form of an argument.
///
/// Besides `key=value` pairs, two spellings make lists (as GuideLLM users
/// write them): a segment without `=` after a key continues that key's
/// list (`streams=1,2,4` is `streams=1;2;4`), and indexed keys give the
/// items one by one (`streams[0]=1,streams[1]=2`, from 0, without gaps).
fn parse_pairs_form(text: &str) -> std::result::Result<KindArgs, String> {
    let segments = split_top_level(text, ',')?;
    let mut kind: Option<String> = None;
    let mut options = Map::new();
    // Full keys given a value, and keys that are parents of others.
    let mut leaves: HashSet<String> = HashSet::new();
    let mut parents: HashSet<String> = HashSet::new();
    // The key the latest `key=value` segment set (not `kind`): a segment
    // without `=` continues its list.
    let mut last: Option<String> = None;
    // Each list given by index: the items given.
    let mut indexed: std::collections::BTreeMap<String, HashSet<usize>> =
        std::collections::BTreeMap::new();

    for (index, segment) in segments.iter().enumerate() {
        let segment = segment.trim();
        if segment.is_empty() {
            return Err(format!(
                "segment {} is empty (a stray comma?); expected `key=value`",
                index + 1
            ));
        }
        let Some((raw_key, raw_value)) = segment.split_once('=') else {
            if let Some(key) = &last {
                continue_list(&mut options, key, segment)?;
                continue;
            }
            let hint = if index == 0 {
                format!(" (did you mean `kind={segment}`?)")
            } else {
                String::new()
            };
            return Err(format!(
                "segment `{segment}` has no `=`; expected `key=value`{hint}"
            ));
        };
        last = None;
        let key = raw_key.trim();
        if key.is_empty() {
            return Err(format!("segment `{segment}` has an empty key"));
        }
        let path = key_parts(key)?;
        let key = key_text(&path);

        if path[0] == Part::Name(KIND) {
            if path.len() > 1 {
                return Err(format!("key `{key}`: `kind` cannot have sub-keys"));
            }
            if kind.is_some() {
                return Err("key `kind` is given twice".to_string());
            }
            kind = Some(parse_kind_value(raw_value)?);
            continue;
        }

        if leaves.contains(&key) {
            return Err(format!("key `{key}` is given twice"));
        }
        if parents.contains(&key) {
            return Err(format!(
                "key `{key}` is given both as a value and as the parent of dotted keys"
            ));
        }
        for end in 1..path.len() {
            let prefix = key_text(&path[..end]);
            if leaves.contains(&prefix) {
                return Err(format!(
                    "key `{prefix}` is given both as a value and as the parent of `{key}`"
                ));
            }
        }

        let value = type_value(&key, raw_value)?;
        insert_nested(&mut options, &path, value).map_err(|prefix| {
            format!("key `{prefix}` is given both as a value and as the parent of `{key}`")
        })?;
        for end in 1..path.len() {
            parents.insert(key_text(&path[..end]));
            if let Part::Index(i) = path[end] {
                indexed.entry(key_text(&path[..end])).or_default().insert(i);
            }
        }
        leaves.insert(key.clone());
        last = Some(key);
    }

    for (list, given) in &indexed {
        if let Some(missing) = (0..given.len()).find(|i| !given.contains(i)) {
            return Err(format!(
                "`{list}[{missing}]` is missing: a list given by index needs every item from \
                 `{list}[0]` on"
            ));
        }
    }
    let kind = kind.ok_or_else(|| MISSING_KIND.to_string())?;
    Ok(KindArgs { kind, options })
}

/// Appends the item `segment` (typed, or the items of a `;` list) to the
/// value of `key`, making it a list if it was one value.
fn continue_list(
    options: &mut Map<String, Value>,
    key: &str,
    segment: &str,
) -> std::result::Result<(), String> {
    let item = type_value(key, segment)?;
    let parts = key_parts(key)?;
    let slot = value_at(options, &parts)
        .ok_or_else(|| format!("segment `{segment}` has no `=`; expected `key=value`"))?;
    let mut items = match std::mem::take(slot) {
        Value::Array(items) => items,
        Value::Object(_) => {
            return Err(format!(
                "segment `{segment}` has no `=`, and `{key}` is an object, not a list"
            ));
        }
        one => vec![one],
    };
    match item {
        Value::Array(more) if !segment.trim_start().starts_with('[') => items.extend(more),
        other => items.push(other),
    }
    *slot = Value::Array(items);
    Ok(())
}

/// The value at `parts`, if there is one.
fn value_at<'m>(map: &'m mut Map<String, Value>, parts: &[Part<'_>]) -> Option<&'m mut Value> {
    let (Part::Name(first), rest) = parts.split_first()? else {
        return None;
    };
    let mut current = map.get_mut(*first)?;
    for part in rest {
        current = match (part, current) {
            (Part::Name(name), Value::Object(inner)) => inner.get_mut(*name)?,
            (Part::Index(i), Value::Array(items)) => items.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(current)
}

/// Reads the value of `kind=...`: a non-empty name.
fn parse_kind_value(raw: &str) -> std::result::Result<String, String> {
    match type_value(KIND, raw)? {
        Value::String(kind) if !kind.trim().is_empty() => Ok(kind.trim().to_string()),
        other => Err(format!(
            "`kind` must be a non-empty name, got {}",
            show_value(&other)
        )),
    }
}

/// Inserts `value` at `path`, creating intermediate objects and lists
/// (a list grows to the index given; items not yet given are `null`).
///
/// Fails with the key of the prefix that already holds a value of another
/// shape.
fn insert_nested(
    map: &mut Map<String, Value>,
    path: &[Part<'_>],
    value: Value,
) -> std::result::Result<(), String> {
    let mut root = Value::Object(std::mem::take(map));
    let result = insert_in(&mut root, path, value, 0).map_err(|depth| key_text(&path[..depth]));
    if let Value::Object(inner) = root {
        *map = inner;
    }
    result
}

/// See [`insert_nested`]; fails with how many parts lead to the value in
/// the way.
fn insert_in(
    node: &mut Value,
    path: &[Part<'_>],
    value: Value,
    depth: usize,
) -> std::result::Result<(), usize> {
    let Some((first, rest)) = path[depth..].split_first() else {
        *node = value;
        return Ok(());
    };
    let empty = |next: Option<&Part<'_>>| match next {
        Some(Part::Index(_)) => Value::Array(Vec::new()),
        _ => Value::Object(Map::new()),
    };
    let child = match (first, node) {
        (Part::Name(name), Value::Object(inner)) => {
            if rest.is_empty() {
                inner.insert((*name).to_string(), value);
                return Ok(());
            }
            inner
                .entry((*name).to_string())
                .or_insert_with(|| empty(rest.first()))
        }
        (Part::Index(i), Value::Array(items)) => {
            if items.len() <= *i {
                items.resize(*i + 1, Value::Null);
            }
            if items[*i].is_null() && !rest.is_empty() {
                items[*i] = empty(rest.first());
            }
            &mut items[*i]
        }
        _ => return Err(depth),
    };
    insert_in(child, path, value, depth + 1)
}

/// Splits `text` on `sep`, except inside JSON brackets, braces and
/// double-quoted strings.
fn split_top_level(text: &str, sep: char) -> std::result::Result<Vec<&str>, String> {
    let (parts, left_open) = split_outside_json(text, sep);
    match left_open {
        LeftOpen::Nothing => Ok(parts),
        LeftOpen::String => Err("unterminated double-quoted string".to_string()),
        LeftOpen::Bracket => Err(
            "unclosed `{` or `[`; to use brackets in plain text, write the value as a JSON string in double quotes"
                .to_string(),
        ),
    }
}

/// Types the value of `key`: a `;`-separated list, or a single value.
fn type_value(key: &str, raw: &str) -> std::result::Result<Value, String> {
    let raw = raw.trim();
    let items = split_top_level(raw, ';').map_err(|e| format!("value of key `{key}`: {e}"))?;
    if items.len() > 1 {
        items
            .iter()
            .map(|item| type_scalar(key, item.trim()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map(Value::Array)
    } else {
        type_scalar(key, raw)
    }
}

/// Types a single (trimmed) value: JSON, boolean, number or text.
fn type_scalar(key: &str, raw: &str) -> std::result::Result<Value, String> {
    if raw.starts_with(['{', '[', '"']) {
        return serde_json::from_str(raw)
            .map_err(|e| format!("invalid JSON value for key `{key}`: {e}"));
    }
    match raw {
        "true" => return Ok(Value::Bool(true)),
        "false" => return Ok(Value::Bool(false)),
        _ => {}
    }
    match number_shape(raw) {
        Some(NumberShape::Integer) => {
            if let Ok(n) = raw.parse::<i64>() {
                return Ok(Value::from(n));
            }
        }
        Some(NumberShape::Float) => {
            if let Some(n) = raw.parse::<f64>().ok().and_then(Number::from_f64) {
                return Ok(Value::Number(n));
            }
        }
        None => {}
    }
    Ok(Value::String(raw.to_string()))
}

/// What a piece of text looks like as a JSON number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NumberShape {
    /// `-?(0|[1-9][0-9]*)`
    Integer,
    /// An integer part followed by a fraction and/or an exponent.
    Float,
}

/// Whether `text` is a JSON number, and of which shape.
///
/// Only the strict JSON grammar counts, so text such as `007`, `+5`, `.5`
/// or `inf` is kept as written.
fn number_shape(text: &str) -> Option<NumberShape> {
    let bytes = text.as_bytes();
    let mut i = 0;
    if bytes.first() == Some(&b'-') {
        i += 1;
    }
    let digits = |from: usize| {
        bytes[from..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count()
    };

    let int_len = digits(i);
    if int_len == 0 || (int_len > 1 && bytes[i] == b'0') {
        return None;
    }
    i += int_len;
    let mut shape = NumberShape::Integer;

    if bytes.get(i) == Some(&b'.') {
        let frac_len = digits(i + 1);
        if frac_len == 0 {
            return None;
        }
        i += 1 + frac_len;
        shape = NumberShape::Float;
    }
    if matches!(bytes.get(i), Some(b'e' | b'E')) {
        i += 1;
        if matches!(bytes.get(i), Some(b'+' | b'-')) {
            i += 1;
        }
        let exp_len = digits(i);
        if exp_len == 0 {
            return None;
        }
        i += exp_len;
        shape = NumberShape::Float;
    }
    (i == bytes.len()).then_some(shape)
}

/// Checks `options` against the union of `specs` for the component named
/// `context`, and normalises the values (strings for `String`, seconds for
/// `Duration`, lists for `List`).
///
/// # Errors
///
/// * [`Error::UnknownOption`] for a key that no spec names, with every valid
///   key, sorted;
/// * [`Error::InvalidOption`] for a value of the wrong type, saying what was
///   expected and what was given;
/// * [`Error::MissingOption`] for a required option that is absent.
pub fn check_options(
    context: &str,
    specs: &[&[OptionSpec]],
    options: &mut Map<String, Value>,
) -> Result<()> {
    let find = |key: &str| {
        specs
            .iter()
            .flat_map(|s| s.iter())
            .find(|spec| spec.name == key)
    };

    for (key, value) in options.iter_mut() {
        let Some(spec) = find(key) else {
            let mut valid: Vec<String> = specs
                .iter()
                .flat_map(|s| s.iter())
                .map(|spec| spec.name.to_string())
                .collect();
            valid.sort();
            valid.dedup();
            return Err(Error::UnknownOption {
                context: context.to_string(),
                key: key.clone(),
                valid,
            });
        };
        *value = normalise(spec.ty, value).map_err(|reason| Error::InvalidOption {
            context: context.to_string(),
            key: key.clone(),
            // The reason shows the value given, unless it is a secret.
            reason: if crate::redact::is_secret(key) {
                format!(
                    "expected a value of type {} (the value given is a secret, not shown)",
                    describe_type(spec.ty)
                )
            } else {
                reason
            },
        })?;
    }

    for spec in specs.iter().flat_map(|s| s.iter()) {
        if spec.required && !options.contains_key(spec.name) {
            return Err(Error::MissingOption {
                context: context.to_string(),
                key: spec.name.to_string(),
            });
        }
    }
    Ok(())
}

/// Checks one value against its type and returns the normalised value.
fn normalise(ty: OptionType, value: &Value) -> std::result::Result<Value, String> {
    let expected = |what: &str| format!("expected {what}, got {}", show_value(value));
    match ty {
        OptionType::Int => as_integer(value).ok_or_else(|| expected("an integer")),
        OptionType::Float => as_float(value)
            .and_then(Number::from_f64)
            .map(Value::Number)
            .ok_or_else(|| expected("a number")),
        OptionType::Bool => match value {
            Value::Bool(b) => Ok(Value::Bool(*b)),
            Value::String(s) if s.trim().eq_ignore_ascii_case("true") => Ok(Value::Bool(true)),
            Value::String(s) if s.trim().eq_ignore_ascii_case("false") => Ok(Value::Bool(false)),
            _ => Err(expected("`true` or `false`")),
        },
        OptionType::String => as_text(value)
            .map(Value::String)
            .ok_or_else(|| expected("a string")),
        OptionType::Duration => parse_seconds(value).and_then(|secs| {
            Number::from_f64(secs)
                .map(Value::Number)
                .ok_or_else(|| expected("a finite duration"))
        }),
        OptionType::Latency => parse_latency(value).and_then(|secs| {
            Number::from_f64(secs)
                .map(Value::Number)
                .ok_or_else(|| expected("a finite duration"))
        }),
        OptionType::List => match value {
            Value::Array(_) => Ok(value.clone()),
            Value::Null => Err(expected("a list")),
            other => Ok(Value::Array(vec![other.clone()])),
        },
        OptionType::Object => match value {
            Value::Object(_) => Ok(value.clone()),
            _ => Err(expected("an object")),
        },
        OptionType::Choice(words) => match as_text(value) {
            Some(text) if words.contains(&text.as_str()) => Ok(Value::String(text)),
            _ => {
                let list = words
                    .iter()
                    .map(|w| format!("`{w}`"))
                    .collect::<Vec<_>>()
                    .join(", ");
                Err(expected(&format!("one of {list}")))
            }
        },
        OptionType::Any => Ok(value.clone()),
    }
}

/// An integer value: an integer number, a float without a fraction, or
/// text holding either.
fn as_integer(value: &Value) -> Option<Value> {
    match value {
        Value::Number(n) if n.is_i64() || n.is_u64() => Some(value.clone()),
        Value::Number(n) => n.as_f64().and_then(float_to_integer),
        Value::String(s) => {
            let s = s.trim();
            match s.parse::<i64>() {
                Ok(n) => Some(Value::from(n)),
                Err(_) => s.parse::<f64>().ok().and_then(float_to_integer),
            }
        }
        _ => None,
    }
}

/// A float with no fractional part that fits an `i64`, as an integer.
fn float_to_integer(f: f64) -> Option<Value> {
    // 2^63: `i64::MIN` is its negation, and it is one past `i64::MAX`.
    const TWO_POW_63: f64 = 9_223_372_036_854_775_808.0;
    let in_range = (-TWO_POW_63..TWO_POW_63).contains(&f);
    (f.is_finite() && f.fract() == 0.0 && in_range).then(|| Value::from(f as i64))
}

/// A finite number from a number or numeric text.
fn as_float(value: &Value) -> Option<f64> {
    match value {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|f| f.is_finite())
}

/// The text of a string, number or boolean.
fn as_text(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

/// A value as JSON text for error messages, shortened when long.
fn show_value(value: &Value) -> String {
    const MAX_CHARS: usize = 80;
    let text = value.to_string();
    if text.chars().count() <= MAX_CHARS {
        text
    } else {
        let mut short: String = text.chars().take(MAX_CHARS).collect();
        short.push('…');
        short
    }
}

/// Deserializes a checked option map into a typed struct.
///
/// # Errors
///
/// [`Error::Config`] naming `context` when the map does not fit `T`.
pub fn from_map<T: serde::de::DeserializeOwned>(
    context: &str,
    options: &Map<String, Value>,
) -> Result<T> {
    serde_json::from_value(Value::Object(options.clone()))
        .map_err(|e| Error::Config(format!("invalid options for {context}: {e}")))
}

/// Duration units as `(suffix, numerator, denominator)` of their length in
/// seconds, longest suffixes first so that `ms` is not read as `m` or `s`.
/// Sub-second units divide, so that `10ms` is exactly `0.01`.
const DURATION_UNITS: &[(&str, f64, f64)] = &[
    ("ns", 1.0, 1e9),
    ("us", 1.0, 1e6),
    ("µs", 1.0, 1e6),
    ("μs", 1.0, 1e6),
    ("ms", 1.0, 1e3),
    ("s", 1.0, 1.0),
    ("m", 60.0, 1.0),
    ("h", 3600.0, 1.0),
];

/// Parses a duration into seconds: a number of seconds, or text holding a
/// number of seconds or a number with a unit (`ns`, `us`, `µs`, `ms`, `s`,
/// `m`, `h`), such as `10ms`, `1.5s` or `-5ms`.
///
/// Negative and zero durations are returned as they are; the caller checks
/// the range it needs.
///
/// # Errors
///
/// A message saying what is wrong when the value is not a finite duration.
pub fn parse_seconds(value: &Value) -> std::result::Result<f64, String> {
    const EXPECTED: &str =
        "expected a duration (seconds, or a number with a unit: ns, us, ms, s, m, h)";
    let seconds = match value {
        Value::Number(n) => n
            .as_f64()
            .ok_or_else(|| format!("{EXPECTED}, got {}", show_value(value)))?,
        Value::String(text) => parse_duration_text(text)
            .ok_or_else(|| format!("{EXPECTED}, got {}", show_value(value)))?,
        _ => return Err(format!("{EXPECTED}, got {}", show_value(value))),
    };
    if seconds.is_finite() {
        Ok(seconds)
    } else {
        Err(format!("duration {} is out of range", show_value(value)))
    }
}

/// Parses a latency ([`OptionType::Latency`]) into seconds: a duration
/// with its unit; a bare number is refused unless it is 0, since `200`
/// could mean milliseconds as well as seconds.
///
/// # Errors
///
/// A message saying what is wrong: a bare number (with the two readings
/// to write instead), or what [`parse_seconds`] refuses.
pub fn parse_latency(value: &Value) -> std::result::Result<f64, String> {
    let bare = match value {
        Value::Number(n) => n.as_f64(),
        Value::String(text) => text.trim().parse::<f64>().ok(),
        _ => None,
    };
    match bare {
        Some(n) if n != 0.0 => Err(format!(
            "a bare number is ambiguous for a latency: write its unit, `{n}ms` or `{n}s`"
        )),
        _ => parse_seconds(value),
    }
}

/// Parses duration text into seconds; `None` when it is not a duration.
fn parse_duration_text(text: &str) -> Option<f64> {
    let text = text.trim();
    let (number, numerator, denominator) = DURATION_UNITS
        .iter()
        .find_map(|(unit, num, den)| text.strip_suffix(unit).map(|n| (n.trim_end(), *num, *den)))
        .unwrap_or((text, 1.0, 1.0));
    // Only plain decimal numbers: `f64::from_str` also takes `inf` and `nan`.
    if number.is_empty()
        || !number
            .chars()
            .all(|c| c.is_ascii_digit() || matches!(c, '.' | '-' | '+' | 'e' | 'E'))
    {
        return None;
    }
    let n: f64 = number.parse().ok()?;
    n.is_finite().then_some(n * numerator / denominator)
}

/// A short name of `ty` for help output.
#[must_use]
pub fn describe_type(ty: OptionType) -> &'static str {
    match ty {
        OptionType::Int => "integer",
        OptionType::Float => "number",
        OptionType::Bool => "bool",
        OptionType::String => "string",
        OptionType::Duration => "duration",
        OptionType::Latency => "latency",
        OptionType::List => "list",
        OptionType::Object => "object",
        OptionType::Choice(_) => "choice",
        OptionType::Any => "any",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_latency_needs_its_unit_and_a_duration_reads_a_bare_number_as_seconds() {
        let latency = |v: Value| parse_latency(&v);
        assert_eq!(latency(json!("200ms")), Ok(0.2));
        assert_eq!(latency(json!("0.2s")), Ok(0.2));
        assert_eq!(latency(json!(0)), Ok(0.0));
        for bare in [json!(200), json!("200"), json!(" 2.5 ")] {
            let err = latency(bare.clone()).expect_err("ambiguous");
            assert!(
                err.contains("ambiguous") && err.contains("ms` or `"),
                "{bare}: {err}"
            );
        }
        assert_eq!(parse_seconds(&json!(200)), Ok(200.0));
        assert_eq!(parse_seconds(&json!("30")), Ok(30.0));
    }
    use proptest::prelude::*;
    use serde_json::json;

    fn parse(input: &str) -> KindArgs {
        match parse_kind_args(input) {
            Ok(args) => args,
            Err(e) => panic!("`{input}` should parse: {e}"),
        }
    }

    fn malformed_reason(input: &str) -> String {
        match parse_kind_args(input) {
            Err(Error::MalformedArgument {
                input: given,
                reason,
            }) => {
                assert_eq!(given, input);
                reason
            }
            other => panic!("`{input}` should be malformed, got {other:?}"),
        }
    }

    fn object(value: Value) -> Map<String, Value> {
        match value {
            Value::Object(map) => map,
            other => panic!("not an object: {other}"),
        }
    }

    const OFFLINE: &[OptionSpec] = &[
        OptionSpec::optional("engine", OptionType::String, "engine name").required(),
        OptionSpec::optional("batch_size", OptionType::Int, "max batch"),
        OptionSpec::optional("batch_timeout", OptionType::Duration, "max wait"),
        OptionSpec::optional("temperature", OptionType::Float, "sampling"),
        OptionSpec::optional("stream", OptionType::Bool, "stream tokens"),
        OptionSpec::optional("stop", OptionType::List, "stop strings"),
        OptionSpec::optional("engine_args", OptionType::Object, "passed to the engine"),
        OptionSpec::optional("mode", OptionType::Choice(&["fast", "exact"]), "mode"),
        OptionSpec::optional("extra", OptionType::Any, "anything"),
    ];
    const ENGINE: &[OptionSpec] = &[
        OptionSpec::optional("threads", OptionType::Int, "threads"),
        OptionSpec::optional("model", OptionType::String, "model path"),
        // Also named by OFFLINE: the union is deduplicated in errors.
        OptionSpec::optional("batch_size", OptionType::Int, "engine batch"),
    ];

    fn check(options: Value) -> Result<Map<String, Value>> {
        let mut map = object(options);
        check_options("backend offline", &[OFFLINE, ENGINE], &mut map)?;
        Ok(map)
    }

    fn invalid_reason(options: Value, expected_key: &str) -> String {
        match check(options) {
            Err(Error::InvalidOption {
                context,
                key,
                reason,
            }) => {
                assert_eq!(context, "backend offline");
                assert_eq!(key, expected_key);
                reason
            }
            other => panic!("expected InvalidOption for `{expected_key}`, got {other:?}"),
        }
    }

    #[test]
    fn typical_argument_is_typed() {
        let args = parse("kind=offline,engine=mock,batch_size=8,batch_timeout=10ms");
        assert_eq!(args.kind, "offline");
        assert_eq!(
            Value::Object(args.options),
            json!({"engine": "mock", "batch_size": 8, "batch_timeout": "10ms"})
        );
    }

    #[test]
    fn scalar_values_are_typed() {
        let args = parse(
            "kind=x,t=true,f=false,i=-42,z=0,p=0.5,e=1e-3,s=hello,empty=,lead=007,plus=+5,inf=inf",
        );
        assert_eq!(
            Value::Object(args.options),
            json!({
                "t": true, "f": false, "i": -42, "z": 0, "p": 0.5, "e": 0.001,
                "s": "hello", "empty": "", "lead": "007", "plus": "+5", "inf": "inf"
            })
        );
    }

    #[test]
    fn integers_are_i64_and_floats_f64() {
        let args = parse("kind=x,i=9223372036854775807,f=2.0,big=99999999999999999999");
        assert!(args.options["i"].is_i64());
        assert!(args.options["f"].is_f64());
        // Too big for an i64: kept as written rather than rounded.
        assert_eq!(args.options["big"], json!("99999999999999999999"));
    }

    #[test]
    fn whitespace_around_keys_and_values_is_trimmed() {
        let args = parse("  kind = offline , engine =  mock  ,  name = a b  ");
        assert_eq!(args.kind, "offline");
        assert_eq!(
            Value::Object(args.options),
            json!({"engine": "mock", "name": "a b"})
        );
    }

    #[test]
    fn json_values_are_parsed() {
        let args = parse(r#"kind=x,obj={"a":1},arr=[1,"two"],quoted="true",neg=-1.5"#);
        assert_eq!(
            Value::Object(args.options),
            json!({"obj": {"a": 1}, "arr": [1, "two"], "quoted": "true", "neg": -1.5})
        );
    }

    #[test]
    fn commas_inside_json_values_do_not_split() {
        let args = parse(r#"kind=x,extra={"a":1,"b":[1,2]},x=1,s="a,b\",c",l=[[1,2],{"k":"}"}]"#);
        assert_eq!(
            Value::Object(args.options),
            json!({"extra": {"a": 1, "b": [1, 2]}, "x": 1, "s": "a,b\",c", "l": [[1, 2], {"k": "}"}]})
        );
    }

    #[test]
    fn semicolons_make_typed_lists() {
        let args = parse(r#"kind=x,stop=a;b;c,mixed=1;2.5;true;word;,json=[1,2];{"a":"x;y"}"#);
        assert_eq!(
            Value::Object(args.options),
            json!({
                "stop": ["a", "b", "c"],
                "mixed": [1, 2.5, true, "word", ""],
                "json": [[1, 2], {"a": "x;y"}]
            })
        );
    }

    #[test]
    fn dotted_keys_nest_into_objects() {
        let args = parse("kind=offline,engine_args.threads=2,engine_args.dtype=f32,a.b.c=x,a.d=1");
        assert_eq!(
            Value::Object(args.options),
            json!({"engine_args": {"threads": 2, "dtype": "f32"}, "a": {"b": {"c": "x"}, "d": 1}})
        );
    }

    #[test]
    fn key_given_twice_is_named() {
        let reason = malformed_reason("kind=x,batch_size=1,batch_size=2");
        assert!(
            reason.contains("`batch_size`") && reason.contains("twice"),
            "{reason}"
        );
        let reason = malformed_reason("kind=x,a.b=1,a.b=2");
        assert!(
            reason.contains("`a.b`") && reason.contains("twice"),
            "{reason}"
        );
        let reason = malformed_reason("kind=x,kind=y");
        assert!(
            reason.contains("`kind`") && reason.contains("twice"),
            "{reason}"
        );
    }

    #[test]
    fn key_that_is_both_value_and_parent_is_named() {
        for input in [
            "kind=x,a=1,a.b=2",
            "kind=x,a.b=2,a=1",
            "kind=x,a.b=1,a.b.c=2",
            r#"kind=x,a={"b":1},a.c=2"#,
        ] {
            let reason = malformed_reason(input);
            assert!(
                reason.contains("both as a value and as the parent"),
                "{input}: {reason}"
            );
            assert!(reason.contains("`a"), "{input}: {reason}");
        }
    }

    #[test]
    fn json_object_form_is_accepted() {
        let args = parse(
            r#"  {"kind": "offline", "engine": "mock", "batch_size": 8, "engine_args": {"threads": 2}} "#,
        );
        assert_eq!(args.kind, "offline");
        assert_eq!(
            Value::Object(args.options),
            json!({"engine": "mock", "batch_size": 8, "engine_args": {"threads": 2}})
        );
    }

    #[test]
    fn json_object_form_needs_a_string_kind() {
        assert!(malformed_reason(r#"{"engine": "mock"}"#).contains("kind=NAME"));
        assert!(malformed_reason(r#"{"kind": 3}"#).contains("non-empty string"));
        assert!(malformed_reason(r#"{"kind": ""}"#).contains("non-empty string"));
        assert!(malformed_reason(r#"{"kind": "x""#).contains("invalid JSON"));
    }

    #[test]
    fn missing_kind_is_a_clear_error() {
        let reason = malformed_reason("engine=mock,batch_size=8");
        assert!(reason.contains("`kind=NAME` is required"), "{reason}");
    }

    #[test]
    fn kind_must_be_a_non_empty_name() {
        assert!(malformed_reason("kind=,engine=mock").contains("non-empty name"));
        assert!(malformed_reason("kind=a;b").contains("non-empty name"));
        assert!(malformed_reason("kind.x=1").contains("sub-keys"));
        assert_eq!(parse(r#"kind="offline""#).kind, "offline");
    }

    #[test]
    fn empty_input_is_malformed() {
        assert!(malformed_reason("").contains("empty"));
        assert!(malformed_reason("   ").contains("empty"));
    }

    #[test]
    fn segment_without_equals_is_named() {
        let reason = malformed_reason("kind=offline,engine");
        assert!(reason.contains("segment `engine` has no `=`"), "{reason}");
        let reason = malformed_reason("offline");
        assert!(reason.contains("did you mean `kind=offline`"), "{reason}");
        let reason = malformed_reason("kind=offline,,engine=mock");
        assert!(reason.contains("segment 2 is empty"), "{reason}");
    }

    #[test]
    fn items_without_equals_after_a_key_continue_its_list() {
        let args = parse("kind=concurrent,streams=1,2,4,rampup=5s");
        assert_eq!(args.options["streams"], json!([1, 2, 4]));
        assert_eq!(args.options["rampup"], "5s");
        // The same as the `;` list, with which it mixes.
        assert_eq!(
            parse("kind=concurrent,streams=1;2,4").options,
            parse("kind=concurrent,streams=1;2;4").options
        );
        assert_eq!(parse("kind=x,stop=a,b").options["stop"], json!(["a", "b"]));
        assert_eq!(parse("kind=x,a.b=1,2").options["a"], json!({"b": [1, 2]}));
        // Nothing to continue after `kind`, nor a JSON object.
        let reason = malformed_reason("kind=concurrent,4");
        assert!(reason.contains("segment `4` has no `=`"), "{reason}");
        let reason = malformed_reason(r#"kind=x,o={"a":1},2"#);
        assert!(reason.contains("is an object"), "{reason}");
    }

    #[test]
    fn indexed_keys_give_list_items_in_order_from_zero() {
        let args = parse("kind=concurrent,streams[1]=2,streams[0]=1,streams[2]=4");
        assert_eq!(args.options["streams"], json!([1, 2, 4]));
        let args = parse("kind=x,items[0].weight=10,items[0].count=5,items[1].weight=3");
        assert_eq!(
            args.options["items"],
            json!([{"weight": 10, "count": 5}, {"weight": 3}])
        );
        let reason = malformed_reason("kind=x,streams[0]=1,streams[2]=4");
        assert!(reason.contains("`streams[1]` is missing"), "{reason}");
        let reason = malformed_reason("kind=x,streams[0]=1,streams[0]=2");
        assert!(reason.contains("`streams[0]` is given twice"), "{reason}");
        let reason = malformed_reason("kind=x,streams=1,streams[0]=2");
        assert!(
            reason.contains("both as a value and as the parent"),
            "{reason}"
        );
        let reason = malformed_reason("kind=x,streams[0]=2,streams=1");
        assert!(
            reason.contains("both as a value and as the parent"),
            "{reason}"
        );
        let reason = malformed_reason("kind=x,streams[100000]=1");
        assert!(reason.contains("at most 9999"), "{reason}");
        let reason = malformed_reason("kind[0]=x");
        assert!(reason.contains("sub-keys"), "{reason}");
        // Brackets that are not an index stay part of the name.
        assert_eq!(parse("kind=x,a[b]=1").options["a[b]"], 1);
    }

    #[test]
    fn empty_keys_are_malformed() {
        assert!(malformed_reason("kind=x,=1").contains("empty key"));
        assert!(malformed_reason("kind=x,a..b=1").contains("`a..b`"));
        assert!(malformed_reason("kind=x,.a=1").contains("empty part"));
    }

    #[test]
    fn invalid_json_value_names_its_key() {
        let reason = malformed_reason(r#"kind=x,extra={"a":}"#);
        assert!(
            reason.contains("invalid JSON value for key `extra`"),
            "{reason}"
        );
        let reason = malformed_reason("kind=x,list=[1,2");
        assert!(reason.contains("unclosed"), "{reason}");
        let reason = malformed_reason(r#"kind=x,s="abc"#);
        assert!(reason.contains("unterminated"), "{reason}");
    }

    #[test]
    fn error_messages_show_the_input() {
        let err = parse_kind_args("kind=x,oops")
            .map(|_| ())
            .map_err(|e| e.to_string());
        let message = err.err().unwrap_or_default();
        assert!(
            message.starts_with("malformed argument `kind=x,oops`"),
            "{message}"
        );
    }

    #[test]
    fn valid_options_are_normalised() {
        let map = match check(json!({
            "engine": 7,
            "batch_size": "16",
            "batch_timeout": "10ms",
            "temperature": "0.5",
            "stream": "true",
            "stop": "END",
            "engine_args": {"a": 1},
            "mode": "fast",
            "extra": [null],
            "threads": 4.0,
            "model": true,
        })) {
            Ok(map) => map,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(
            Value::Object(map),
            json!({
                "engine": "7",
                "batch_size": 16,
                "batch_timeout": 0.01,
                "temperature": 0.5,
                "stream": true,
                "stop": ["END"],
                "engine_args": {"a": 1},
                "mode": "fast",
                "extra": [null],
                "threads": 4,
                "model": "true",
            })
        );
    }

    #[test]
    fn integer_options_reject_fractions_and_text() {
        assert_eq!(
            invalid_reason(json!({"engine": "m", "batch_size": "abc"}), "batch_size"),
            r#"expected an integer, got "abc""#
        );
        assert_eq!(
            invalid_reason(json!({"engine": "m", "threads": 2.5}), "threads"),
            "expected an integer, got 2.5"
        );
        assert_eq!(
            invalid_reason(json!({"engine": "m", "threads": true}), "threads"),
            "expected an integer, got true"
        );
    }

    #[test]
    fn wrong_type_says_what_was_expected() {
        let cases = [
            (
                json!({"temperature": "hot"}),
                "temperature",
                r#"expected a number, got "hot""#,
            ),
            (
                json!({"stream": "yes"}),
                "stream",
                r#"expected `true` or `false`, got "yes""#,
            ),
            (
                json!({"engine": [1]}),
                "engine",
                "expected a string, got [1]",
            ),
            (
                json!({"engine_args": "x"}),
                "engine_args",
                r#"expected an object, got "x""#,
            ),
            (json!({"stop": null}), "stop", "expected a list, got null"),
            (
                json!({"mode": "slow"}),
                "mode",
                r#"expected one of `fast`, `exact`, got "slow""#,
            ),
        ];
        for (options, key, expected) in cases {
            assert_eq!(invalid_reason(options, key), expected);
        }
        let reason = invalid_reason(json!({"batch_timeout": "soon"}), "batch_timeout");
        assert!(
            reason.starts_with("expected a duration") && reason.ends_with(r#"got "soon""#),
            "{reason}"
        );
    }

    #[test]
    fn unknown_key_names_itself_and_lists_valid_keys() {
        match check(json!({"engine": "mock", "batch_sise": 8})) {
            Err(Error::UnknownOption {
                context,
                key,
                valid,
            }) => {
                assert_eq!(context, "backend offline");
                assert_eq!(key, "batch_sise");
                let expected = [
                    "batch_size",
                    "batch_timeout",
                    "engine",
                    "engine_args",
                    "extra",
                    "mode",
                    "model",
                    "stop",
                    "stream",
                    "temperature",
                    "threads",
                ];
                assert_eq!(valid, expected);
            }
            other => panic!("expected UnknownOption, got {other:?}"),
        }
    }

    #[test]
    fn missing_required_option_is_named() {
        match check(json!({"batch_size": 8})) {
            Err(Error::MissingOption { context, key }) => {
                assert_eq!(context, "backend offline");
                assert_eq!(key, "engine");
            }
            other => panic!("expected MissingOption, got {other:?}"),
        }
    }

    #[test]
    fn parsed_arguments_check_against_specs() {
        let mut args = parse(
            "kind=offline,engine=mock,batch_size=8,batch_timeout=1.5s,stop=a;b,engine_args.dtype=f32",
        );
        let result = check_options("backend offline", &[OFFLINE, ENGINE], &mut args.options);
        assert!(result.is_ok(), "{result:?}");
        assert_eq!(args.options["batch_timeout"], json!(1.5));
        assert_eq!(args.options["stop"], json!(["a", "b"]));
        assert_eq!(args.options["engine_args"], json!({"dtype": "f32"}));
    }

    #[test]
    fn durations_accept_units_and_plain_seconds() {
        let cases = [
            (json!(2), 2.0),
            (json!(0.25), 0.25),
            (json!("3"), 3.0),
            (json!("1.5s"), 1.5),
            (json!("10ms"), 0.01),
            (json!("250us"), 250e-6),
            (json!("250µs"), 250e-6),
            (json!("100ns"), 100e-9),
            (json!("2m"), 120.0),
            (json!("1h"), 3600.0),
            (json!(" 5 ms "), 0.005),
            (json!("-5ms"), -0.005),
            (json!("0"), 0.0),
            (json!("1e-3s"), 0.001),
        ];
        for (value, seconds) in cases {
            match parse_seconds(&value) {
                Ok(got) => assert!((got - seconds).abs() < 1e-12, "{value}: {got} != {seconds}"),
                Err(e) => panic!("{value}: {e}"),
            }
        }
    }

    #[test]
    fn bad_durations_say_what_is_wrong() {
        for value in [
            json!("ms"),
            json!("fast"),
            json!("10 parsecs"),
            json!("infs"),
            json!("nan"),
            json!(true),
            json!([1]),
        ] {
            match parse_seconds(&value) {
                Err(reason) => assert!(reason.contains("expected a duration"), "{value}: {reason}"),
                Ok(s) => panic!("{value} should not parse, got {s}"),
            }
        }
        match parse_seconds(&json!("1e308h")) {
            Err(reason) => assert!(reason.contains("out of range"), "{reason}"),
            Ok(s) => panic!("should overflow, got {s}"),
        }
    }

    #[test]
    fn types_have_help_names() {
        assert_eq!(describe_type(OptionType::Int), "integer");
        assert_eq!(describe_type(OptionType::Float), "number");
        assert_eq!(describe_type(OptionType::Duration), "duration");
        assert_eq!(describe_type(OptionType::Choice(&["a"])), "choice");
        assert_eq!(describe_type(OptionType::Any), "any");
    }

    #[test]
    fn from_map_builds_typed_structs_and_names_the_context() {
        #[derive(serde::Deserialize, Debug)]
        struct Opts {
            batch_size: u32,
            engine: String,
        }
        let map = object(json!({"batch_size": 8, "engine": "mock"}));
        match from_map::<Opts>("backend offline", &map) {
            Ok(opts) => {
                assert_eq!(opts.batch_size, 8);
                assert_eq!(opts.engine, "mock");
            }
            Err(e) => panic!("{e}"),
        }
        let map = object(json!({"batch_size": -1, "engine": "mock"}));
        match from_map::<Opts>("backend offline", &map) {
            Err(e) => assert!(e.to_string().contains("backend offline"), "{e}"),
            Ok(opts) => panic!("should fail, got {opts:?}"),
        }
    }

    fn simple_value() -> impl Strategy<Value = Value> {
        prop_oneof![
            any::<i64>().prop_map(Value::from),
            any::<bool>().prop_map(Value::from),
            "[a-zA-Z]{0,12}"
                .prop_filter("would be typed as a bool", |s| s != "true" && s != "false")
                .prop_map(Value::from),
        ]
    }

    fn render(value: &Value) -> String {
        match value {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    #[derive(serde::Serialize)]
    struct Shown {
        count: usize,
        #[serde(serialize_with = "serialize_duration")]
        wait: std::time::Duration,
        #[serde(serialize_with = "serialize_seconds")]
        delay: f64,
        mode: &'static str,
        stop: Vec<&'static str>,
        limit: Option<usize>,
        on: bool,
        scale: f64,
        share: f64,
    }

    impl Default for Shown {
        fn default() -> Self {
            Shown {
                count: 256,
                wait: std::time::Duration::from_millis(10),
                delay: 1.5,
                mode: "constant",
                stop: vec!["a", "b"],
                limit: None,
                on: false,
                scale: 1.0,
                share: 0.95,
            }
        }
    }

    #[test]
    fn help_prints_the_typed_default_as_a_user_writes_it() {
        let shown = |name: &'static str| {
            OptionSpec::optional(name, OptionType::Any, "")
                .default_from::<Shown>()
                .default_text()
        };
        assert_eq!(shown("count").as_deref(), Some("256"));
        assert_eq!(shown("wait").as_deref(), Some("10ms"));
        assert_eq!(shown("delay").as_deref(), Some("1.5s"));
        assert_eq!(shown("mode").as_deref(), Some("constant"));
        assert_eq!(shown("stop").as_deref(), Some("a,b"));
        assert_eq!(shown("on").as_deref(), Some("false"));
        assert_eq!(shown("scale").as_deref(), Some("1"));
        assert_eq!(shown("share").as_deref(), Some("0.95"));
        // Unset, and a key the struct does not have: no default to print.
        assert_eq!(shown("limit"), None);
        assert_eq!(shown("nonesuch"), None);
        let plain = OptionSpec::optional("count", OptionType::Int, "");
        assert_eq!(plain.default_text(), None);
    }

    #[test]
    fn durations_print_in_whole_seconds_milliseconds_or_decimal_seconds() {
        let text = |seconds: f64| duration_text(std::time::Duration::from_secs_f64(seconds));
        assert_eq!(text(0.0), "0s");
        assert_eq!(text(30.0), "30s");
        assert_eq!(text(0.25), "250ms");
        assert_eq!(text(1.5), "1.5s");
        assert_eq!(text(0.000_001), "0.000001s");
        for seconds in [0.0, 30.0, 0.25, 1.5, 0.000_001] {
            let shown = Value::String(text(seconds));
            let back = parse_seconds(&shown).expect("help's text parses");
            assert!(
                (back - seconds).abs() < 1e-12,
                "{seconds} -> {shown} -> {back}"
            );
        }
    }

    proptest! {
        #[test]
        fn rendered_simple_maps_parse_back_to_the_same_typed_map(
            map in proptest::collection::btree_map(
                "[a-z][a-z0-9_]{0,10}".prop_filter("reserved", |k| k != "kind"),
                simple_value(),
                0..10,
            )
        ) {
            let mut input = "kind=x".to_string();
            for (key, value) in &map {
                input.push_str(&format!(",{key}={}", render(value)));
            }
            let args = parse_kind_args(&input);
            prop_assert!(args.is_ok(), "{input}: {args:?}");
            if let Ok(args) = args {
                prop_assert_eq!(args.kind, "x");
                let expected: Map<String, Value> = map.into_iter().collect();
                prop_assert_eq!(args.options, expected);
            }
        }

        #[test]
        fn comma_and_indexed_lists_parse_as_semicolon_lists(
            items in proptest::collection::vec(any::<i64>(), 2..6)
        ) {
            let text: Vec<String> = items.iter().map(ToString::to_string).collect();
            let semicolons = parse_kind_args(&format!("kind=x,n={},m=1", text.join(";")));
            let commas = parse_kind_args(&format!("kind=x,n={},m=1", text.join(",")));
            let indexed: Vec<String> =
                text.iter().enumerate().rev().map(|(i, v)| format!("n[{i}]={v}")).collect();
            let indexed = parse_kind_args(&format!("kind=x,{},m=1", indexed.join(",")));
            prop_assert!(semicolons.is_ok());
            let semicolons = semicolons.map(|a| a.options).ok();
            prop_assert_eq!(&commas.map(|a| a.options).ok(), &semicolons);
            prop_assert_eq!(&indexed.map(|a| a.options).ok(), &semicolons);
        }

        #[test]
        fn parse_kind_args_never_panics(input in ".{0,64}") {
            let _ = parse_kind_args(&input);
        }

        #[test]
        fn parse_kind_args_never_panics_on_grammar_characters(
            input in r#"[a-z0-9=,;.{}\[\]"\\ :-]{0,48}"#
        ) {
            let _ = parse_kind_args(&input);
        }

        #[test]
        fn parse_seconds_never_panics(text in ".{0,24}") {
            let _ = parse_seconds(&Value::String(text));
        }
    }
}
