//! The cdc-normalizer's compiled record path.
//!
//! A [`RecordProgram`] is one (row schema, key schema) pair, decided in Python
//! (`services/cdc_normalizer/native_row.py`): per column of the row and of the key, its field
//! name, the conversion the Python converter applies and the Avro type the change record has.
//! Given one JsonConverter record of a PostgreSQL connector (the key's and the value's payloads
//! after their schema blocks), [`RecordProgram::record`] writes the Avro bodies of the change
//! record's Kafka key and value: operation, position, timestamps, transaction id, source map,
//! key and row, without a Python object per field.
//!
//! The contract is the Python path's output, byte for byte, or nothing: everything the program
//! is not certain about (another connector or shape, a type, range, text form or placeholder
//! the fast paths of `converters.py` would not take) makes it return `None`, and the caller
//! takes the Python path for that record, which then returns or raises what it always did.
//! [`RowProgram`] writes one row image, for the tests of each column kind.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::{BTreeMap, HashMap};

mod change;

const MIN_DAYS: i64 = -719_162; // 0001-01-01
const MAX_DAYS: i64 = 2_932_896; // 9999-12-31
const MIN_MICROS: i64 = -62_135_596_800_000_000; // 0001-01-01T00:00:00
const MAX_MICROS: i64 = 253_402_300_799_999_999; // 9999-12-31T23:59:59.999999
const MICROS_PER_DAY: i64 = 86_400_000_000;
const TEXT_SCALE_LIMIT: i64 = 1000;

/// Not a value the program writes: the record takes the Python path.
struct Fallback;

type Step<T> = Result<T, Fallback>;

#[derive(Clone, Copy)]
enum Kind {
    /// Connect INT8/16/32 (Avro int): an integer in [low, high).
    Int {
        low: i64,
        high: i64,
    },
    /// Connect INT64 (Avro long).
    Long,
    /// `_int` of a named integer (Year: Avro int, MicroDuration: Avro long): any integer the Avro
    /// type holds.
    NamedInt {
        avro_long: bool,
    },
    Boolean,
    /// A string column (plain, Json, Enum, Xml, Interval): the text as it is.
    Text,
    /// A canonical lower-case uuid text.
    Uuid,
    /// Base64 text of bytes.
    Bytes,
    Double,
    Float,
    /// Days since the epoch (Avro int date).
    Date,
    /// A local timestamp in a unit (Avro local-timestamp-micros).
    LocalTimestamp {
        micros_per_unit: i64,
        nanos: bool,
    },
    /// A time of day in a unit (Avro time-micros).
    Time {
        micros_per_unit: i64,
        nanos: bool,
    },
    /// Debezium's UTC text `YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z` (Avro timestamp-micros).
    ZonedTimestamp,
    /// A Connect Decimal's base64 unscaled bytes at the target scale (Avro bytes decimal).
    Decimal {
        precision: u32,
    },
    /// A decimal as text (Avro string): base64 unscaled bytes at the Connect scale, or a
    /// VariableScaleDecimal's `{"scale", "value"}`.
    DecimalText {
        bytes_scale: Option<i64>,
    },
}

struct Column {
    name: String,
    kind: Kind,
    optional: bool,
    /// An array column of `kind` items (converters._array): whether an item may be null.
    items: Option<bool>,
}

/// Columns of one record (a row or a key) and how each is written.
struct Columns {
    columns: Vec<Column>,
    known: HashMap<String, usize>,
    placeholder: String,
    placeholder_base64: String,
}

type ColumnSpecs = Vec<(String, String, i64, i64, bool)>;

fn kind_of(name: &str, a: i64, b: i64) -> PyResult<Kind> {
    Ok(match name {
        "int" if (1..=32).contains(&a) => Kind::Int {
            low: -(1i64 << (a - 1)),
            high: 1i64 << (a - 1),
        },
        "long" => Kind::Long,
        "named-int" => Kind::NamedInt { avro_long: a == 64 },
        "boolean" => Kind::Boolean,
        "text" => Kind::Text,
        "uuid" => Kind::Uuid,
        "bytes" => Kind::Bytes,
        "double" => Kind::Double,
        "float" => Kind::Float,
        "date" => Kind::Date,
        "local-timestamp" => Kind::LocalTimestamp {
            micros_per_unit: a,
            nanos: b != 0,
        },
        "time" => Kind::Time {
            micros_per_unit: a,
            nanos: b != 0,
        },
        "zoned-timestamp" => Kind::ZonedTimestamp,
        "decimal" => Kind::Decimal { precision: a as u32 },
        "decimal-text" => Kind::DecimalText {
            bytes_scale: if a != 0 { Some(b) } else { None },
        },
        other => {
            return Err(PyValueError::new_err(format!(
                "unknown column kind {other:?} ({a}, {b})"
            )))
        }
    })
}

impl Columns {
    fn new(specs: ColumnSpecs, placeholder: &str, placeholder_base64: &str) -> PyResult<Self> {
        let mut columns = Vec::with_capacity(specs.len());
        let mut known = HashMap::new();
        for (index, (name, kind, a, b, optional)) in specs.into_iter().enumerate() {
            known.insert(name.clone(), index);
            // "items:<kind>" and "nullable-items:<kind>": an array of that kind's items.
            let (items, kind) = match (kind.strip_prefix("items:"), kind.strip_prefix("nullable-items:")) {
                (Some(item), _) => (Some(false), item.to_string()),
                (_, Some(item)) => (Some(true), item.to_string()),
                _ => (None, kind),
            };
            columns.push(Column {
                name,
                kind: kind_of(&kind, a, b)?,
                optional,
                items,
            });
        }
        Ok(Columns {
            columns,
            known,
            placeholder: placeholder.to_string(),
            placeholder_base64: placeholder_base64.to_string(),
        })
    }

    /// A row image (converters._struct: every field a column, an absent one null).
    fn write_row(&self, row: &Map<String, Value>, out: &mut Vec<u8>) -> Step<()> {
        if row.len() > self.columns.len() || !row.keys().all(|name| self.known.contains_key(name)) {
            return Err(Fallback);
        }
        for column in &self.columns {
            match row.get(&column.name) {
                None | Some(Value::Null) => {
                    if !column.optional {
                        return Err(Fallback);
                    }
                    out.push(0); // the null branch
                }
                Some(value) => {
                    if column.optional {
                        out.push(2); // branch 1
                    }
                    self.write_column(column, value, out)?;
                }
            }
        }
        Ok(())
    }

    /// The key columns from the record key's payload (normalize._key_values: each present and
    /// not null; other fields of the payload are not read).
    fn write_key(&self, key: &Map<String, Value>, out: &mut Vec<u8>) -> Step<()> {
        for column in &self.columns {
            match key.get(&column.name) {
                None | Some(Value::Null) => return Err(Fallback),
                Some(value) => {
                    if column.optional {
                        out.push(2);
                    }
                    self.write_column(column, value, out)?;
                }
            }
        }
        Ok(())
    }

    fn write_column(&self, column: &Column, value: &Value, out: &mut Vec<u8>) -> Step<()> {
        let Some(nullable_items) = column.items else {
            return self.write_value(column.kind, value, out);
        };
        let Value::Array(items) = value else {
            return Err(Fallback);
        };
        if let [Value::String(only)] = items.as_slice() {
            if *only == self.placeholder {
                return Err(Fallback); // an unchanged TOASTed array (plan.unavailable)
            }
        }
        // The Avro encoder's array: one block of every item, then the empty block.
        if !items.is_empty() {
            write_long(out, items.len() as i64);
            for item in items {
                match item {
                    Value::Null if nullable_items => out.push(0),
                    Value::Null => return Err(Fallback),
                    item => {
                        if nullable_items {
                            out.push(2);
                        }
                        self.write_value(column.kind, item, out)?;
                    }
                }
            }
        }
        out.push(0);
        Ok(())
    }

    fn write_value(&self, kind: Kind, value: &Value, out: &mut Vec<u8>) -> Step<()> {
        match kind {
            Kind::Int { low, high } => {
                let n = integer(value)?;
                if n < low || n >= high {
                    return Err(Fallback);
                }
                write_long(out, n);
            }
            Kind::Long => write_long(out, integer(value)?),
            Kind::NamedInt { avro_long } => {
                let n = integer(value)?;
                if !avro_long && i32::try_from(n).is_err() {
                    return Err(Fallback);
                }
                write_long(out, n);
            }
            Kind::Boolean => match value {
                Value::Bool(b) => out.push(u8::from(*b)),
                _ => return Err(Fallback),
            },
            Kind::Text => {
                let text = string(value)?;
                if text == self.placeholder {
                    return Err(Fallback);
                }
                write_bytes(out, text.as_bytes());
            }
            Kind::Uuid => {
                let text = string(value)?;
                if !is_canonical_uuid(text) {
                    return Err(Fallback);
                }
                write_bytes(out, text.as_bytes());
            }
            Kind::Bytes => {
                let text = string(value)?;
                if text == self.placeholder || text == self.placeholder_base64 {
                    return Err(Fallback);
                }
                let data = if text.is_empty() { Vec::new() } else { base64(text)? };
                write_bytes(out, &data);
            }
            Kind::Double => {
                let x = float(value)?;
                out.extend_from_slice(&x.to_le_bytes());
            }
            Kind::Float => {
                let x = float(value)?;
                let y = x as f32;
                if !y.is_finite() {
                    return Err(Fallback);
                }
                out.extend_from_slice(&y.to_le_bytes());
            }
            Kind::Date => {
                let days = integer(value)?;
                if !(MIN_DAYS..=MAX_DAYS).contains(&days) {
                    return Err(Fallback);
                }
                write_long(out, days);
            }
            Kind::LocalTimestamp { micros_per_unit, nanos } => {
                let micros = scaled(integer(value)?, micros_per_unit, nanos)?;
                if !(MIN_MICROS..=MAX_MICROS).contains(&micros) {
                    return Err(Fallback);
                }
                write_long(out, micros);
            }
            Kind::Time { micros_per_unit, nanos } => {
                let micros = scaled(integer(value)?, micros_per_unit, nanos)?;
                if !(0..MICROS_PER_DAY).contains(&micros) {
                    return Err(Fallback);
                }
                write_long(out, micros);
            }
            Kind::ZonedTimestamp => write_long(out, utc_micros(string(value)?)?),
            Kind::Decimal { precision } => {
                let data = base64(string(value)?)?;
                let unscaled = signed(&data)?;
                if precision <= 38 {
                    let limit = 10u128.pow(precision);
                    if unscaled.unsigned_abs() >= limit {
                        return Err(Fallback);
                    }
                }
                // fastavro's prepare_bytes_decimal: (bit_length(|n|) + 8) // 8 bytes.
                let bits = 128 - unscaled.unsigned_abs().leading_zeros();
                let size = ((bits + 8) / 8) as usize;
                let all = unscaled.to_be_bytes();
                write_bytes(out, &all[16 - size..]);
            }
            Kind::DecimalText { bytes_scale } => {
                let (data, scale) = match (value, bytes_scale) {
                    (Value::String(text), Some(scale)) => (base64(text)?, scale),
                    (Value::Object(map), _) => {
                        let scale = match map.get("scale") {
                            Some(Value::Number(n)) if is_integer_text(n.as_str()) => {
                                n.as_str().parse::<i64>().map_err(|_| Fallback)?
                            }
                            _ => return Err(Fallback),
                        };
                        match map.get("value") {
                            Some(Value::String(text)) => (base64(text)?, scale),
                            _ => return Err(Fallback),
                        }
                    }
                    _ => return Err(Fallback),
                };
                if data.is_empty() || !(-TEXT_SCALE_LIMIT..=TEXT_SCALE_LIMIT).contains(&scale) {
                    return Err(Fallback);
                }
                let text = decimal_text(signed(&data)?, scale);
                write_bytes(out, text.as_bytes());
            }
        }
        Ok(())
    }
}

/// One record schema's columns, for the tests of each column kind: `row` writes an image.
#[pyclass(frozen, module = "icefjord_native")]
struct RowProgram {
    row: Columns,
}

#[pymethods]
impl RowProgram {
    /// `columns`: `(field name, kind, a, b, optional)` in the row's field order; `a` and `b` are
    /// the kind's parameters (bits; unit and nanos; precision and scale; has a Connect scale
    /// and that scale).
    #[new]
    fn new(columns: ColumnSpecs, placeholder: &str, placeholder_base64: &str) -> PyResult<Self> {
        Ok(RowProgram {
            row: Columns::new(columns, placeholder, placeholder_base64)?,
        })
    }

    /// The Avro body of the row record for one image (a JSON object's text), or None.
    fn row<'py>(&self, py: Python<'py>, image: &[u8]) -> Option<Bound<'py, PyBytes>> {
        let Ok(Value::Object(image)) = serde_json::from_slice::<Value>(image) else {
            return None;
        };
        let mut out = Vec::with_capacity(64);
        self.row
            .write_row(&image, &mut out)
            .ok()
            .map(|()| PyBytes::new(py, &out))
    }
}

/// The envelope's fields, each left as JSON text until it is read.
#[derive(serde::Deserialize)]
struct Envelope<'a> {
    #[serde(borrow, default)]
    op: Option<&'a RawValue>,
    #[serde(borrow, default)]
    before: Option<&'a RawValue>,
    #[serde(borrow, default)]
    after: Option<&'a RawValue>,
    #[serde(borrow, default)]
    source: Option<&'a RawValue>,
    #[serde(borrow, default)]
    transaction: Option<&'a RawValue>,
    #[serde(borrow, default)]
    ts_ms: Option<&'a RawValue>,
}

/// A change record of one (row schema, key schema): the whole Kafka key and value bodies.
#[pyclass(frozen, module = "icefjord_native")]
struct RecordProgram {
    row: Columns,
    key: Columns,
}

const OPS: [(&str, i64); 4] = [("c", 0), ("u", 1), ("d", 2), ("r", 3)];

#[pymethods]
impl RecordProgram {
    /// `row` and `key`: column specs as for RowProgram (the key's in key order).
    #[new]
    fn new(row: ColumnSpecs, key: ColumnSpecs, placeholder: &str, placeholder_base64: &str) -> PyResult<Self> {
        Ok(RecordProgram {
            row: Columns::new(row, placeholder, placeholder_base64)?,
            key: Columns::new(key, placeholder, placeholder_base64)?,
        })
    }

    /// `(namespace, table, op index, key body, value body)` of one JsonConverter record of a
    /// PostgreSQL connector, whose payloads are `value[value_start..value_end]` and
    /// `key[key_start..key_end]`; None for anything the program does not write.
    #[pyo3(signature = (value, value_start, value_end, key, key_start, key_end, topic, partition, offset, timestamp_ms))]
    #[allow(clippy::too_many_arguments)]
    fn record<'py>(
        &self,
        py: Python<'py>,
        value: &[u8],
        value_start: usize,
        value_end: usize,
        key: &[u8],
        key_start: usize,
        key_end: usize,
        topic: &str,
        partition: i64,
        offset: i64,
        timestamp_ms: Option<i64>,
    ) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let (Some(value), Some(key)) = (value.get(value_start..value_end), key.get(key_start..key_end)) else {
            return Ok(None);
        };
        let origin = Origin {
            topic,
            partition,
            offset,
            timestamp_ms,
        };
        let Ok(written) = self.write(value, key, &origin) else {
            return Ok(None);
        };
        let (namespace, table, op, key_body, value_body) = written;
        Ok(Some(PyTuple::new(
            py,
            [
                namespace.into_pyobject(py)?.into_any(),
                table.into_pyobject(py)?.into_any(),
                op.into_pyobject(py)?.into_any(),
                PyBytes::new(py, &key_body).into_any(),
                PyBytes::new(py, &value_body).into_any(),
            ],
        )?))
    }
}

struct Origin<'a> {
    topic: &'a str,
    partition: i64,
    offset: i64,
    timestamp_ms: Option<i64>,
}

type Written = (String, String, i64, Vec<u8>, Vec<u8>);

fn parsed_object(raw: Option<&RawValue>) -> Step<Option<Map<String, Value>>> {
    match raw.map(|text| serde_json::from_str::<Value>(text.get())) {
        None | Some(Ok(Value::Null)) => Ok(None),
        Some(Ok(Value::Object(map))) => Ok(Some(map)),
        Some(_) => Err(Fallback),
    }
}

/// An object or null: its shape only (normalize reads nothing else of it here).
fn object_or_null(raw: Option<&RawValue>) -> Step<()> {
    match raw.map(|text| text.get().trim_start().as_bytes().first().copied()) {
        None | Some(Some(b'{')) | Some(Some(b'n')) => Ok(()),
        _ => Err(Fallback),
    }
}

/// A non-negative integer (a position component), or 0 for null or absent.
fn component(value: Option<&Value>) -> Step<u64> {
    match value {
        None | Some(Value::Null) => Ok(0),
        Some(value) => natural(value),
    }
}

fn natural(value: &Value) -> Step<u64> {
    match value {
        Value::Number(n) if is_integer_text(n.as_str()) && !n.as_str().starts_with('-') => {
            n.as_str().parse::<u64>().map_err(|_| Fallback)
        }
        _ => Err(Fallback),
    }
}

/// `"[\"24023120\",\"24023128\"]"`: position._plain_sequence's form only.
fn plain_sequence(text: &str) -> Step<(u64, u64)> {
    let inner = text
        .strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .ok_or(Fallback)?;
    let mut items = inner.split(',');
    let (Some(first), Some(second), None) = (items.next(), items.next(), items.next()) else {
        return Err(Fallback);
    };
    let quoted = |item: &str| -> Step<u64> {
        let digits = item
            .trim_matches([' ', '\t', '\n', '\r'])
            .strip_prefix('"')
            .and_then(|t| t.strip_suffix('"'))
            .ok_or(Fallback)?;
        if digits.is_empty() || !digits.bytes().all(|c| c.is_ascii_digit()) {
            return Err(Fallback);
        }
        digits.parse::<u64>().map_err(|_| Fallback)
    };
    Ok((quoted(first)?, quoted(second)?))
}

/// normalize._source_text for the values written here: text, booleans and integers.
fn source_text(value: &Value) -> Step<Option<String>> {
    Ok(match value {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        Value::Bool(b) => Some(if *b { "true" } else { "false" }.to_string()),
        Value::Number(n) if is_integer_text(n.as_str()) => {
            Some(n.as_str().parse::<i64>().map_err(|_| Fallback)?.to_string())
        }
        _ => return Err(Fallback),
    })
}

/// `str(value)` of a transaction id: text, or an integer.
fn id_text(value: &Value) -> Step<String> {
    match value {
        Value::String(text) => Ok(text.clone()),
        Value::Number(n) if is_integer_text(n.as_str()) => {
            Ok(n.as_str().parse::<i64>().map_err(|_| Fallback)?.to_string())
        }
        _ => Err(Fallback),
    }
}

fn write_text(out: &mut Vec<u8>, text: &str) {
    write_bytes(out, text.as_bytes());
}

impl RecordProgram {
    fn write(&self, value: &[u8], key: &[u8], origin: &Origin) -> Step<Written> {
        let envelope: Envelope = serde_json::from_slice(value).map_err(|_| Fallback)?;
        // envelope.parse_value's full envelope; the flattened shape stays on the Python path.
        if envelope.op.is_none() || (envelope.before.is_none() && envelope.after.is_none() && envelope.source.is_none())
        {
            return Err(Fallback);
        }
        let op_name = match envelope.op.map(|raw| serde_json::from_str::<Value>(raw.get())) {
            Some(Ok(Value::String(op))) => op,
            _ => return Err(Fallback),
        };
        let op = OPS.iter().find(|(name, _)| *name == op_name).ok_or(Fallback)?.1;
        object_or_null(envelope.before)?;
        let source = parsed_object(envelope.source)?.ok_or(Fallback)?;
        let transaction = parsed_object(envelope.transaction)?;

        // The table: a PostgreSQL source's schema and table (normalize._table_of).
        if source.get("connector") != Some(&Value::String("postgresql".to_string())) {
            return Err(Fallback);
        }
        let (Some(Value::String(namespace)), Some(Value::String(table))) = (source.get("schema"), source.get("table"))
        else {
            return Err(Fallback);
        };
        if namespace.is_empty() || table.is_empty() {
            return Err(Fallback);
        }

        // source_ts_ms: source.ts_ms, the envelope's ts_ms, the Kafka timestamp.
        let envelope_ts = match envelope.ts_ms.map(|raw| serde_json::from_str::<Value>(raw.get())) {
            None => Value::Null,
            Some(Ok(value)) => value,
            Some(Err(_)) => return Err(Fallback),
        };
        let ts_ms = match (source.get("ts_ms"), &envelope_ts, origin.timestamp_ms) {
            (Some(value @ Value::Number(_)), _, _) => integer(value)?,
            (None | Some(Value::Null), value @ Value::Number(_), _) => integer(value)?,
            (None | Some(Value::Null), Value::Null, Some(stamp)) => stamp,
            _ => return Err(Fallback),
        };

        // position._postgres: [last_commit_lsn, lsn] from the sequence text, else (lsn,); then txId.
        let tx_component = component(source.get("txId"))?;
        let position = match source.get("sequence") {
            Some(Value::String(sequence)) => {
                let (commit, lsn) = plain_sequence(sequence)?;
                format!("{commit:020}.{lsn:020}.{tx_component:020}")
            }
            None | Some(Value::Null) => {
                let lsn = natural(source.get("lsn").ok_or(Fallback)?)?;
                format!("{lsn:020}.{tx_component:020}")
            }
            Some(_) => return Err(Fallback),
        };
        if position.split('.').any(|part| part.len() != 20) {
            return Err(Fallback); // a component of 21 digits: InvalidPosition's to report
        }

        // tx_id: the transaction block's id, else txId, gtid or commit_lsn of the source.
        let tx_id = match transaction.as_ref().and_then(|t| t.get("id")) {
            Some(value) if !value.is_null() => Some(id_text(value)?),
            _ => {
                let mut found = None;
                for name in ["txId", "gtid", "commit_lsn"] {
                    if let Some(value) = source.get(name) {
                        if !value.is_null() {
                            found = Some(id_text(value)?);
                            break;
                        }
                    }
                }
                found
            }
        };

        // The source map: every non-null source field as text, then the origin coordinates.
        let mut map: BTreeMap<&str, String> = BTreeMap::new();
        for (name, value) in &source {
            if let Some(text) = source_text(value)? {
                map.insert(name.as_str(), text);
            }
        }
        map.insert("position_kind", "postgresql".to_string());
        map.insert("origin_topic", origin.topic.to_string());
        map.insert("origin_partition", origin.partition.to_string());
        map.insert("origin_offset", origin.offset.to_string());
        if let Some(stamp) = origin.timestamp_ms {
            map.insert("origin_timestamp_ms", stamp.to_string());
        }

        // The key, from the record key's payload.
        let Ok(Value::Object(key_payload)) = serde_json::from_slice::<Value>(key) else {
            return Err(Fallback);
        };
        let mut key_body = Vec::with_capacity(16);
        self.key.write_key(&key_payload, &mut key_body)?;

        let mut out = Vec::with_capacity(value.len() / 2);
        write_long(&mut out, op);
        write_text(&mut out, &position);
        write_long(&mut out, ts_ms);
        match &tx_id {
            None => out.push(0),
            Some(id) => {
                out.push(2);
                write_text(&mut out, id);
            }
        }
        write_long(&mut out, map.len() as i64);
        for (name, text) in &map {
            write_text(&mut out, name);
            write_text(&mut out, text);
        }
        out.push(0); // end of the map's blocks
        out.extend_from_slice(&key_body);
        if op == 2 {
            object_or_null(envelope.after)?;
            out.push(0); // a delete's after is null
        } else {
            let after = parsed_object(envelope.after)?.ok_or(Fallback)?;
            out.push(2);
            self.row.write_row(&after, &mut out)?;
        }
        out.push(0); // unchanged: null (a placeholder sends the record to the Python path)
        Ok((namespace.clone(), table.clone(), op, key_body, out))
    }
}

fn is_integer_text(text: &str) -> bool {
    !text.contains(['.', 'e', 'E'])
}

fn integer(value: &Value) -> Step<i64> {
    match value {
        Value::Number(n) if is_integer_text(n.as_str()) => n.as_str().parse::<i64>().map_err(|_| Fallback),
        _ => Err(Fallback),
    }
}

fn string(value: &Value) -> Step<&str> {
    match value {
        Value::String(text) => Ok(text),
        _ => Err(Fallback),
    }
}

/// `float(x)` of the number Python reads: an int, or a Decimal of the text. Both round once,
/// to nearest, as Rust's parse does; an integral zero is +0.0 (Python's int has no -0).
fn float(value: &Value) -> Step<f64> {
    let Value::Number(n) = value else {
        return Err(Fallback);
    };
    let text = n.as_str();
    let x: f64 = text.parse().map_err(|_| Fallback)?;
    if !x.is_finite() {
        return Err(Fallback);
    }
    Ok(if x == 0.0 && is_integer_text(text) { 0.0 } else { x })
}

fn scaled(n: i64, micros_per_unit: i64, nanos: bool) -> Step<i64> {
    if nanos {
        Ok(n.div_euclid(1000))
    } else {
        n.checked_mul(micros_per_unit).ok_or(Fallback)
    }
}

/// Avro long: zigzag varint.
fn write_long(out: &mut Vec<u8>, n: i64) {
    let mut z = ((n << 1) ^ (n >> 63)) as u64;
    while z > 0x7F {
        out.push(((z & 0x7F) | 0x80) as u8);
        z >>= 7;
    }
    out.push(z as u8);
}

fn write_bytes(out: &mut Vec<u8>, data: &[u8]) {
    write_long(out, data.len() as i64);
    out.extend_from_slice(data);
}

fn is_canonical_uuid(text: &str) -> bool {
    let bytes = text.as_bytes();
    bytes.len() == 36
        && bytes.iter().enumerate().all(|(i, &c)| match i {
            8 | 13 | 18 | 23 => c == b'-',
            _ => c.is_ascii_digit() || (b'a'..=b'f').contains(&c),
        })
}

fn sextet(c: u8) -> Option<u32> {
    Some(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => return None,
    } as u32)
}

/// Canonical standard base64 only (padding to a multiple of four, zero pad bits): a subset of
/// what Python's strict and validating decoders accept, giving the same bytes.
fn base64(text: &str) -> Step<Vec<u8>> {
    let bytes = text.as_bytes();
    if bytes.is_empty() || !bytes.len().is_multiple_of(4) {
        return Err(Fallback);
    }
    let pad = bytes.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return Err(Fallback);
    }
    let mut out = Vec::with_capacity(bytes.len() / 4 * 3);
    let last = bytes.len() / 4 - 1;
    for (index, chunk) in bytes.chunks(4).enumerate() {
        let used = if index == last { 4 - pad } else { 4 };
        let mut group = 0u32;
        for &c in &chunk[..used] {
            group = (group << 6) | sextet(c).ok_or(Fallback)?;
        }
        match used {
            4 => out.extend_from_slice(&group.to_be_bytes()[1..]),
            3 => {
                if group & 0b11 != 0 {
                    return Err(Fallback);
                }
                out.extend_from_slice(&(group >> 2).to_be_bytes()[2..]);
            }
            _ => {
                if group & 0b1111 != 0 {
                    return Err(Fallback);
                }
                out.push((group >> 4) as u8);
            }
        }
    }
    Ok(out)
}

/// Big-endian two's complement, at most 16 bytes.
fn signed(data: &[u8]) -> Step<i128> {
    if data.is_empty() || data.len() > 16 {
        return Err(Fallback);
    }
    let fill = if data[0] & 0x80 != 0 { 0xFF } else { 0 };
    let mut all = [fill; 16];
    all[16 - data.len()..].copy_from_slice(data);
    Ok(i128::from_be_bytes(all))
}

/// converters._decimal_text: the unscaled integer's digits with the point `scale` from the right.
fn decimal_text(unscaled: i128, scale: i64) -> String {
    if scale <= 0 {
        if unscaled == 0 {
            return "0".to_string();
        }
        return format!("{unscaled}{}", "0".repeat((-scale) as usize));
    }
    let scale = scale as usize;
    let mut digits = unscaled.unsigned_abs().to_string();
    if digits.len() <= scale {
        digits = "0".repeat(scale + 1 - digits.len()) + &digits;
    }
    let sign = if unscaled < 0 { "-" } else { "" };
    let point = digits.len() - scale;
    format!("{sign}{}.{}", &digits[..point], &digits[point..])
}

fn digits(text: &[u8]) -> Step<i64> {
    let mut n = 0i64;
    for &c in text {
        if !c.is_ascii_digit() {
            return Err(Fallback);
        }
        n = n * 10 + i64::from(c - b'0');
    }
    Ok(n)
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Microseconds since the epoch of `YYYY-MM-DDTHH:MM:SS[.f{1,6}]Z` (temporal's `_UTC_TEXT`,
/// which `datetime.fromisoformat` reads); any other text, or a field out of range, falls back.
fn utc_micros(text: &str) -> Step<i64> {
    let b = text.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || b[10] != b'T' || b[13] != b':' || b[16] != b':' {
        return Err(Fallback);
    }
    if *b.last().unwrap_or(&0) != b'Z' {
        return Err(Fallback);
    }
    let (year, month, day) = (digits(&b[0..4])?, digits(&b[5..7])?, digits(&b[8..10])?);
    let (hour, minute, second) = (digits(&b[11..13])?, digits(&b[14..16])?, digits(&b[17..19])?);
    let fraction = &b[19..b.len() - 1];
    let micros = match fraction.len() {
        0 => 0,
        2..=7 if fraction[0] == b'.' => {
            let digits_text = &fraction[1..];
            digits(digits_text)? * 10i64.pow((6 - digits_text.len()) as u32)
        }
        _ => return Err(Fallback),
    };
    if year < 1 || !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(Fallback);
    }
    if hour > 23 || minute > 59 || second > 59 {
        return Err(Fallback);
    }
    let seconds = days_from_civil(year, month, day) * 86_400 + hour * 3600 + minute * 60 + second;
    Ok(seconds * 1_000_000 + micros)
}

#[pymodule]
fn icefjord_native(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add_class::<RowProgram>()?;
    module.add_class::<RecordProgram>()?;
    module.add_class::<change::ChangeProgram>()?;
    Ok(())
}
