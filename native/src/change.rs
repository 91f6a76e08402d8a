//! The iceberg-writer's compiled change path.
//!
//! A [`ChangeProgram`] is one registered change record schema (with its named types expanded,
//! `services/iceberg_writer/native_changes.py`) and the table's key columns.
//! [`ChangeProgram::decode`] reads one change record's body: operation, position, source commit
//! time, the key's values and the columns an update left unchanged become Python objects; the
//! row stays bytes, and only where it starts is returned. [`ChangeProgram::columns`] then reads
//! the rows of a whole batch into Arrow buffers, column by column, without a Python object per
//! value.
//!
//! The contract is the Python path's result or nothing: a body the program is not certain about
//! (trailing bytes, invalid UTF-8, a value out of the range of the Python type the decoder
//! builds, a boolean byte other than 0 or 1) makes `decode` return None and the caller decode it
//! in Python, which returns or raises what it always did; a column whose table type is not the
//! one the row's Avro type maps to makes `columns` return None, and the batch is built in Python.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};
use serde_json::{Map, Value};

use crate::{is_canonical_uuid, signed, MAX_DAYS, MAX_MICROS, MICROS_PER_DAY, MIN_DAYS, MIN_MICROS};

/// Not a body (or a batch) the program reads: the Python path takes it.
struct Miss;

type Read<T> = Result<T, Miss>;

/// Any Avro type, for reading past a value.
enum Node {
    Null,
    Bool,
    Varint,
    Float,
    Double,
    Bytes,
    Fixed(usize),
    Array(Box<Node>),
    Map(Box<Node>),
    Record(Vec<Node>),
    Union(Vec<Node>),
}

/// A row column's Avro type, as the program reads it.
#[derive(Clone, PartialEq)]
enum Kind {
    Bool,
    Int,
    Long,
    Float,
    Double,
    Text,
    /// Text in a uuid's canonical form; any other text takes the Python path.
    Uuid,
    Bytes,
    Date,
    /// Microseconds per unit; a UTC instant or a local date-time.
    Timestamp {
        per_unit: i64,
        utc: bool,
    },
    /// Microseconds per unit; stored as `HH:MM:SS.ffffff` text.
    Time {
        per_unit: i64,
    },
    Decimal {
        precision: u32,
        scale: i64,
    },
    Enum(Vec<String>),
    /// An array of items of a kind above (no arrays of arrays); `null_branch` of a nullable
    /// item.
    Array {
        item: Box<Kind>,
        null_branch: Option<u64>,
    },
}

struct Column {
    name: String,
    kind: Kind,
    /// The union branch that is null, for a nullable column.
    null_branch: Option<u64>,
}

enum Role {
    Op(Vec<i64>),
    Position,
    SourceTs,
    Key,
    After,
    Unchanged,
    Skip(Node),
}

const OP_NAMES: [&str; 5] = ["CREATE", "UPDATE", "DELETE", "READ", "TRUNCATE"];
const UPDATE: i64 = 1;
const TRUNCATE: i64 = 4;

fn bad(message: impl Into<String>) -> PyErr {
    PyValueError::new_err(message.into())
}

fn type_name(schema: &Value) -> Option<&str> {
    match schema {
        Value::String(name) => Some(name),
        Value::Object(object) => object.get("type").and_then(Value::as_str),
        _ => None,
    }
}

fn node(schema: &Value) -> PyResult<Node> {
    if let Value::Array(branches) = schema {
        return Ok(Node::Union(branches.iter().map(node).collect::<PyResult<_>>()?));
    }
    let object = schema.as_object();
    Ok(match type_name(schema).ok_or_else(|| bad("a type without a name"))? {
        "null" => Node::Null,
        "boolean" => Node::Bool,
        "int" | "long" | "enum" => Node::Varint,
        "float" => Node::Float,
        "double" => Node::Double,
        "bytes" | "string" => Node::Bytes,
        "fixed" => Node::Fixed(
            object
                .and_then(|o| o.get("size"))
                .and_then(Value::as_u64)
                .ok_or_else(|| bad("fixed without size"))? as usize,
        ),
        "array" => Node::Array(Box::new(node(
            object.and_then(|o| o.get("items")).ok_or_else(|| bad("array"))?,
        )?)),
        "map" => Node::Map(Box::new(node(
            object.and_then(|o| o.get("values")).ok_or_else(|| bad("map"))?,
        )?)),
        "record" | "error" => Node::Record(
            fields(schema)?
                .iter()
                .map(|f| node(f.get("type").unwrap_or(&Value::Null)))
                .collect::<PyResult<_>>()?,
        ),
        other => return Err(bad(format!("type {other} is a name reference or unknown"))),
    })
}

fn fields(schema: &Value) -> PyResult<&Vec<Value>> {
    schema
        .get("fields")
        .and_then(Value::as_array)
        .ok_or_else(|| bad("a record without fields"))
}

/// `(null branch, the other branch)` of a `[null, T]` union, or `(None, schema)`.
fn nullable(schema: &Value) -> PyResult<(Option<u64>, &Value)> {
    let Value::Array(branches) = schema else {
        return Ok((None, schema));
    };
    if branches.len() != 2 {
        return Err(bad("a union that is not [null, T]"));
    }
    let nulls: Vec<bool> = branches.iter().map(|b| type_name(b) == Some("null")).collect();
    match (nulls[0], nulls[1]) {
        (true, false) => Ok((Some(0), &branches[1])),
        (false, true) => Ok((Some(1), &branches[0])),
        _ => Err(bad("a union that is not [null, T]")),
    }
}

fn kind(schema: &Value) -> PyResult<Kind> {
    let name = type_name(schema).ok_or_else(|| bad("a type without a name"))?;
    let object: Map<String, Value> = schema.as_object().cloned().unwrap_or_default();
    let logical = object.get("logicalType").and_then(Value::as_str);
    Ok(match (name, logical) {
        ("boolean", None) => Kind::Bool,
        ("int", None) => Kind::Int,
        ("int", Some("date")) => Kind::Date,
        ("int", Some("time-millis")) => Kind::Time { per_unit: 1000 },
        ("long", None) => Kind::Long,
        ("long", Some("time-micros")) => Kind::Time { per_unit: 1 },
        ("long", Some("timestamp-micros")) => Kind::Timestamp { per_unit: 1, utc: true },
        ("long", Some("timestamp-millis")) => Kind::Timestamp {
            per_unit: 1000,
            utc: true,
        },
        ("long", Some("local-timestamp-micros")) => Kind::Timestamp {
            per_unit: 1,
            utc: false,
        },
        ("long", Some("local-timestamp-millis")) => Kind::Timestamp {
            per_unit: 1000,
            utc: false,
        },
        ("float", None) => Kind::Float,
        ("double", None) => Kind::Double,
        ("string", Some("uuid")) => Kind::Uuid,
        ("string", _) => Kind::Text,
        ("bytes", None) => Kind::Bytes,
        ("bytes", Some("decimal")) => {
            let precision = object
                .get("precision")
                .and_then(Value::as_u64)
                .ok_or_else(|| bad("decimal"))?;
            let scale = object.get("scale").and_then(Value::as_i64).unwrap_or(0);
            if !(1..=38).contains(&precision) || scale < 0 || scale as u64 > precision {
                return Err(bad("a decimal beyond 38 digits"));
            }
            Kind::Decimal {
                precision: precision as u32,
                scale,
            }
        }
        ("enum", _) => Kind::Enum(
            object
                .get("symbols")
                .and_then(Value::as_array)
                .ok_or_else(|| bad("enum without symbols"))?
                .iter()
                .map(|s| s.as_str().map(str::to_owned).ok_or_else(|| bad("enum symbol")))
                .collect::<PyResult<_>>()?,
        ),
        ("array", None) => {
            let (null_branch, base) = nullable(object.get("items").unwrap_or(&Value::Null))?;
            let item = kind(base)?;
            if matches!(item, Kind::Array { .. }) {
                return Err(bad("an array of arrays"));
            }
            Kind::Array {
                item: Box::new(item),
                null_branch,
            }
        }
        (other, logical) => return Err(bad(format!("{other} ({logical:?}) is not a kind the program reads"))),
    })
}

fn columns_of(record: &Value) -> PyResult<Vec<Column>> {
    fields(record)?
        .iter()
        .map(|field| {
            let name = field
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a field without a name"))?;
            let (null_branch, base) = nullable(field.get("type").unwrap_or(&Value::Null))?;
            Ok(Column {
                name: name.to_owned(),
                kind: kind(base)?,
                null_branch,
            })
        })
        .collect()
}

/// A change record schema and the table's key columns, compiled.
#[pyclass(frozen, module = "icefjord_native")]
pub struct ChangeProgram {
    roles: Vec<Role>,
    key_fields: Vec<Column>,
    /// Per key record field, where its value goes in the key tuple (None: not a key column).
    key_slots: Vec<Option<usize>>,
    keys: usize,
    row: Vec<Column>,
}

struct Cursor<'a> {
    data: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn long(&mut self) -> Read<i64> {
        let mut value: u64 = 0;
        let mut shift = 0;
        loop {
            let byte = *self.data.get(self.at).ok_or(Miss)?;
            self.at += 1;
            if shift == 63 && byte > 1 {
                return Err(Miss);
            }
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return Err(Miss);
            }
        }
        Ok((value >> 1) as i64 ^ -((value & 1) as i64))
    }

    fn int(&mut self) -> Read<i64> {
        let value = self.long()?;
        if value < i64::from(i32::MIN) || value > i64::from(i32::MAX) {
            return Err(Miss);
        }
        Ok(value)
    }

    fn take(&mut self, n: usize) -> Read<&'a [u8]> {
        let end = self.at.checked_add(n).ok_or(Miss)?;
        let slice = self.data.get(self.at..end).ok_or(Miss)?;
        self.at = end;
        Ok(slice)
    }

    fn bytes(&mut self) -> Read<&'a [u8]> {
        let n = self.long()?;
        if n < 0 {
            return Err(Miss);
        }
        self.take(n as usize)
    }

    fn text(&mut self) -> Read<&'a str> {
        std::str::from_utf8(self.bytes()?).map_err(|_| Miss)
    }

    fn uuid(&mut self) -> Read<&'a str> {
        let text = self.text()?;
        if !is_canonical_uuid(text) {
            return Err(Miss);
        }
        Ok(text)
    }

    fn branch(&mut self, count: usize) -> Read<u64> {
        let index = self.long()?;
        if index < 0 || index as usize >= count {
            return Err(Miss);
        }
        Ok(index as u64)
    }

    fn skip(&mut self, node: &Node) -> Read<()> {
        match node {
            Node::Null => {}
            Node::Bool => {
                self.take(1)?;
            }
            Node::Varint => {
                self.long()?;
            }
            Node::Float => {
                self.take(4)?;
            }
            Node::Double => {
                self.take(8)?;
            }
            Node::Bytes => {
                self.bytes()?;
            }
            Node::Fixed(size) => {
                self.take(*size)?;
            }
            Node::Array(item) => self.blocks(|c| c.skip(item))?,
            Node::Map(value) => self.blocks(|c| {
                c.bytes()?;
                c.skip(value)
            })?,
            Node::Record(fields) => {
                for field in fields {
                    self.skip(field)?;
                }
            }
            Node::Union(branches) => {
                let index = self.branch(branches.len())?;
                self.skip(&branches[index as usize])?;
            }
        }
        Ok(())
    }

    /// Array or map blocks, each item read by `item`.
    fn blocks(&mut self, mut item: impl FnMut(&mut Self) -> Read<()>) -> Read<()> {
        loop {
            let mut count = self.long()?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                count = count.checked_neg().ok_or(Miss)?;
                self.long()?; // the block's size in bytes
            }
            for _ in 0..count {
                item(self)?;
            }
        }
    }

    /// Read past one row value, checking it is one the Python decoder reads to the same value.
    fn value(&mut self, kind: &Kind) -> Read<()> {
        match kind {
            Kind::Bool => {
                if self.take(1)?[0] > 1 {
                    return Err(Miss);
                }
            }
            Kind::Int => {
                self.int()?;
            }
            Kind::Long => {
                self.long()?;
            }
            Kind::Float => {
                self.take(4)?;
            }
            Kind::Double => {
                self.take(8)?;
            }
            Kind::Text => {
                self.text()?;
            }
            Kind::Uuid => {
                self.uuid()?;
            }
            Kind::Bytes => {
                self.bytes()?;
            }
            Kind::Date => {
                let days = self.int()?;
                if !(MIN_DAYS..=MAX_DAYS).contains(&days) {
                    return Err(Miss);
                }
            }
            Kind::Timestamp { per_unit, .. } => {
                let micros = self.long()?.checked_mul(*per_unit).ok_or(Miss)?;
                if !(MIN_MICROS..=MAX_MICROS).contains(&micros) {
                    return Err(Miss);
                }
            }
            Kind::Time { per_unit } => {
                let count = if *per_unit == 1 { self.long()? } else { self.int()? };
                let micros = count.checked_mul(*per_unit).ok_or(Miss)?;
                if !(0..MICROS_PER_DAY).contains(&micros) {
                    return Err(Miss);
                }
            }
            Kind::Decimal { precision, .. } => {
                let unscaled = unscaled(self.bytes()?)?;
                if unscaled.unsigned_abs() >= 10u128.pow(*precision) {
                    return Err(Miss);
                }
            }
            Kind::Enum(symbols) => {
                let index = self.long()?;
                if index < 0 || index as usize >= symbols.len() {
                    return Err(Miss);
                }
            }
            Kind::Array { item, null_branch } => self.blocks(|c| {
                if let Some(null) = null_branch {
                    if c.branch(2)? == *null {
                        return Ok(());
                    }
                }
                c.value(item)
            })?,
        }
        Ok(())
    }

    /// Read past a row record; `at` per column (None: null) when asked.
    fn row(&mut self, columns: &[Column], mut at: Option<&mut Vec<Option<usize>>>) -> Read<()> {
        for column in columns {
            if let Some(null) = column.null_branch {
                if self.branch(2)? == null {
                    if let Some(at) = at.as_deref_mut() {
                        at.push(None);
                    }
                    continue;
                }
            }
            if let Some(at) = at.as_deref_mut() {
                at.push(Some(self.at));
            }
            self.value(&column.kind)?;
        }
        Ok(())
    }
}

/// A decimal's unscaled value (big-endian two's complement, at most 16 bytes).
fn unscaled(data: &[u8]) -> Read<i128> {
    signed(data).map_err(|_| Miss)
}

/// One Arrow column's buffers under construction.
struct Built {
    validity: Vec<u8>,
    nulls: usize,
    offsets32: Vec<i32>,
    offsets64: Vec<i64>,
    data: Vec<u8>,
    /// A list column's items: their count and buffers.
    items: Option<(usize, Box<Built>)>,
}

impl Built {
    fn new(layout: Layout, n: usize) -> Built {
        let mut built = Built {
            validity: vec![0u8; n.div_ceil(8)],
            nulls: 0,
            offsets32: Vec::new(),
            offsets64: Vec::new(),
            data: Vec::with_capacity(match layout {
                Layout::Bits => n.div_ceil(8),
                Layout::Fixed(width) => n * width,
                _ => n * 8,
            }),
            items: None,
        };
        if layout == Layout::Bits {
            built.data.resize(n.div_ceil(8), 0);
        }
        match layout {
            Layout::Var32 | Layout::List(_, false) => built.offsets32.push(0),
            Layout::Var64 | Layout::List(_, true) => built.offsets64.push(0),
            _ => {}
        }
        built
    }

    /// A null at the end: no bit in the validity, a zero value or an empty one.
    fn push_null(&mut self, layout: Layout) {
        self.nulls += 1;
        match layout {
            Layout::Bits => {}
            Layout::Fixed(width) => self.data.resize(self.data.len() + width, 0),
            Layout::Var32 | Layout::List(_, false) => self.offsets32.push(*self.offsets32.last().unwrap_or(&0)),
            Layout::Var64 | Layout::List(_, true) => self.offsets64.push(*self.offsets64.last().unwrap_or(&0)),
        }
    }
}

/// The Arrow layout a table column asks for.
#[derive(Clone, Copy, PartialEq)]
enum Layout {
    Bits,
    Fixed(usize),
    Var32,
    Var64,
    /// A list of items of a layout above; with 64-bit offsets (a large list) or 32-bit ones.
    List(&'static Layout, bool),
}

/// The layout of `arrow` (one of `columns`' names) whatever the row holds; None for another.
fn plain_layout(arrow: &str) -> Option<Layout> {
    Some(match arrow {
        "bool" => Layout::Bits,
        "int32" | "date32" | "float32" => Layout::Fixed(4),
        "int64" | "float64" | "timestamp_us" => Layout::Fixed(8),
        "decimal128" => Layout::Fixed(16),
        "string" | "binary" => Layout::Var32,
        "large_string" | "large_binary" => Layout::Var64,
        _ => {
            let (large, item) = list_target(arrow)?;
            Layout::List(leaf(plain_layout(item)?)?, large)
        }
    })
}

/// Whether `arrow` names a large list or a list, and its item's type.
fn list_target(arrow: &str) -> Option<(bool, &str)> {
    match (arrow.strip_prefix("large_list:"), arrow.strip_prefix("list:")) {
        (Some(item), _) => Some((true, item)),
        (_, Some(item)) => Some((false, item)),
        _ => None,
    }
}

/// `layout` as a `'static` item layout of a list; None for a list itself.
fn leaf(layout: Layout) -> Option<&'static Layout> {
    Some(match layout {
        Layout::Bits => &Layout::Bits,
        Layout::Fixed(4) => &Layout::Fixed(4),
        Layout::Fixed(8) => &Layout::Fixed(8),
        Layout::Fixed(16) => &Layout::Fixed(16),
        Layout::Var32 => &Layout::Var32,
        Layout::Var64 => &Layout::Var64,
        _ => return None,
    })
}

impl ChangeProgram {
    fn read<'a>(&self, body: &'a [u8], start: usize) -> Read<Decoded<'a>> {
        let mut c = Cursor { data: body, at: start };
        let mut out = Decoded {
            op: -1,
            position: "",
            source_ts: 0,
            key: vec![None; self.keys],
            row: None,
            unchanged: None,
        };
        for role in &self.roles {
            match role {
                Role::Op(ops) => {
                    let index = c.long()?;
                    out.op = *ops.get(usize::try_from(index).map_err(|_| Miss)?).ok_or(Miss)?;
                }
                Role::Position => out.position = c.text()?,
                Role::SourceTs => out.source_ts = c.long()?,
                Role::Key => {
                    for (field, slot) in self.key_fields.iter().zip(&self.key_slots) {
                        if let Some(null) = field.null_branch {
                            if c.branch(2)? == null {
                                if slot.is_some() {
                                    return Err(Miss); // a null key value: the Python path decides
                                }
                                continue;
                            }
                        }
                        let Some(slot) = slot else {
                            c.value(&field.kind)?;
                            continue;
                        };
                        out.key[*slot] = Some(match field.kind {
                            Kind::Int => KeyValue::Int(c.int()?),
                            Kind::Long => KeyValue::Int(c.long()?),
                            Kind::Text => KeyValue::Text(c.text()?),
                            Kind::Uuid => KeyValue::Text(c.uuid()?),
                            _ => return Err(Miss),
                        });
                    }
                }
                Role::After => {
                    if c.branch(2)? == 1 {
                        out.row = Some(c.at);
                        c.row(&self.row, None)?;
                    }
                }
                Role::Unchanged => {
                    if c.branch(2)? == 1 {
                        let mut names = Vec::new();
                        c.blocks(|c| {
                            names.push(c.text()?);
                            Ok(())
                        })?;
                        out.unchanged = Some(names);
                    }
                }
                Role::Skip(node) => c.skip(node)?,
            }
        }
        if c.at != body.len() || out.op < 0 {
            return Err(Miss);
        }
        Ok(out)
    }

    fn layout(&self, kind: &Kind, arrow: &str, a: i64, b: i64) -> Option<Layout> {
        use Kind::*;
        if let Array { item, .. } = kind {
            let (large, arrow) = list_target(arrow)?;
            let inner = self.layout(item, arrow, a, b)?;
            return Some(Layout::List(leaf(inner)?, large));
        }
        Some(match (kind, arrow) {
            (Bool, "bool") => Layout::Bits,
            (Int, "int32") | (Date, "date32") | (Float, "float32") => Layout::Fixed(4),
            (Int | Long, "int64") | (Float | Double, "float64") => Layout::Fixed(8),
            (Timestamp { utc, .. }, "timestamp_us") if *utc == (a == 1) => Layout::Fixed(8),
            (Decimal { precision, scale }, "decimal128") if i64::from(*precision) <= a && *scale == b => {
                Layout::Fixed(16)
            }
            (Text | Uuid | Enum(_) | Time { .. }, "string") | (Bytes, "binary") => Layout::Var32,
            (Text | Uuid | Enum(_) | Time { .. }, "large_string") | (Bytes, "large_binary") => Layout::Var64,
            _ => return None,
        })
    }

    fn column(
        &self,
        rows: &[Option<(&[u8], Vec<Option<usize>>)>],
        field: Option<usize>,
        layout: Layout,
    ) -> Read<Built> {
        let n = rows.len();
        let mut built = Built::new(layout, n);
        if let Layout::List(item_layout, _) = layout {
            built.items = Some((0, Box::new(Built::new(*item_layout, 0))));
        }
        for (i, row) in rows.iter().enumerate() {
            let at = match (row, field) {
                (Some((body, ats)), Some(f)) => ats[f].map(|at| (*body, at)),
                _ => None,
            };
            match at {
                None => built.push_null(layout),
                Some((body, at)) => {
                    built.validity[i / 8] |= 1 << (i % 8);
                    let mut c = Cursor { data: body, at };
                    let kind = &self.row[field.unwrap_or(0)].kind;
                    match (kind, layout) {
                        (Kind::Array { item, null_branch }, Layout::List(item_layout, large)) => {
                            self.put_items(&mut c, item, *null_branch, (*item_layout, large), &mut built)?;
                        }
                        _ => self.put(&mut c, kind, layout, i, &mut built)?,
                    }
                }
            }
        }
        Ok(built)
    }

    /// One array value's items appended to a list column's items, and its end offset.
    fn put_items(
        &self,
        c: &mut Cursor,
        item: &Kind,
        null_branch: Option<u64>,
        (layout, large): (Layout, bool),
        list: &mut Built,
    ) -> Read<()> {
        let (count, items) = list.items.as_mut().ok_or(Miss)?;
        c.blocks(|c| {
            let j = *count;
            *count += 1;
            if items.validity.len() * 8 <= j {
                items.validity.push(0);
                if layout == Layout::Bits {
                    items.data.push(0);
                }
            }
            if let Some(null) = null_branch {
                if c.branch(2)? == null {
                    items.push_null(layout);
                    return Ok(());
                }
            }
            items.validity[j / 8] |= 1 << (j % 8);
            self.put(c, item, layout, j, items)
        })?;
        if large {
            list.offsets64.push(*count as i64);
        } else {
            list.offsets32.push(i32::try_from(*count).map_err(|_| Miss)?);
        }
        Ok(())
    }

    fn put(&self, c: &mut Cursor, kind: &Kind, layout: Layout, i: usize, out: &mut Built) -> Read<()> {
        match kind {
            Kind::Bool => {
                if c.take(1)?[0] == 1 {
                    out.data[i / 8] |= 1 << (i % 8);
                }
            }
            Kind::Int | Kind::Date => {
                let value = c.int()?;
                if layout == Layout::Fixed(8) {
                    out.data.extend_from_slice(&value.to_le_bytes());
                } else {
                    out.data.extend_from_slice(&(value as i32).to_le_bytes());
                }
            }
            Kind::Long => out.data.extend_from_slice(&c.long()?.to_le_bytes()),
            Kind::Timestamp { per_unit, .. } => {
                out.data.extend_from_slice(&(c.long()? * per_unit).to_le_bytes());
            }
            Kind::Float => {
                let raw = c.take(4)?;
                if layout == Layout::Fixed(8) {
                    let value = f32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]);
                    out.data.extend_from_slice(&f64::from(value).to_le_bytes());
                } else {
                    out.data.extend_from_slice(raw);
                }
            }
            Kind::Double => out.data.extend_from_slice(c.take(8)?),
            Kind::Decimal { .. } => out.data.extend_from_slice(&unscaled(c.bytes()?)?.to_le_bytes()),
            Kind::Text | Kind::Uuid | Kind::Bytes => {
                let value = c.bytes()?;
                out.data.extend_from_slice(value);
                self.end_value(layout, out)?;
            }
            Kind::Enum(symbols) => {
                let index = usize::try_from(c.long()?).map_err(|_| Miss)?;
                out.data.extend_from_slice(symbols.get(index).ok_or(Miss)?.as_bytes());
                self.end_value(layout, out)?;
            }
            Kind::Array { .. } => return Err(Miss), // put_items reads them
            Kind::Time { per_unit } => {
                let count = if *per_unit == 1 { c.long()? } else { c.int()? };
                let micros = count * per_unit;
                let seconds = micros / 1_000_000;
                let text = format!(
                    "{:02}:{:02}:{:02}.{:06}",
                    seconds / 3600,
                    seconds / 60 % 60,
                    seconds % 60,
                    micros % 1_000_000
                );
                out.data.extend_from_slice(text.as_bytes());
                self.end_value(layout, out)?;
            }
        }
        Ok(())
    }

    fn end_value(&self, layout: Layout, out: &mut Built) -> Read<()> {
        match layout {
            Layout::Var32 => out.offsets32.push(i32::try_from(out.data.len()).map_err(|_| Miss)?),
            _ => out.offsets64.push(out.data.len() as i64),
        }
        Ok(())
    }
}

#[derive(Clone, Copy)]
enum KeyValue<'a> {
    Int(i64),
    Text(&'a str),
}

struct Decoded<'a> {
    op: i64,
    position: &'a str,
    source_ts: i64,
    key: Vec<Option<KeyValue<'a>>>,
    row: Option<usize>,
    unchanged: Option<Vec<&'a str>>,
}

type Target = (String, String, i64, i64);
type Buffers<'py> = (
    usize,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
    Option<(usize, Items<'py>)>,
);
/// A list column's items: null count, validity, offsets and data, as a column's.
type Items<'py> = (
    usize,
    Option<Bound<'py, PyBytes>>,
    Option<Bound<'py, PyBytes>>,
    Bound<'py, PyBytes>,
);

#[pymethods]
impl ChangeProgram {
    /// `schema`: the change record schema's JSON, named types expanded; `keys`: the table's key
    /// columns in order. ValueError for a schema the program does not read.
    #[new]
    fn new(schema: &str, keys: Vec<String>) -> PyResult<Self> {
        let schema: Value = serde_json::from_str(schema).map_err(|e| bad(e.to_string()))?;
        let mut roles = Vec::new();
        let mut key_fields = Vec::new();
        let mut key_slots = Vec::new();
        let mut row = None;
        let mut seen = Vec::new();
        for field in fields(&schema)? {
            let name = field
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("a field without a name"))?;
            let avro = field.get("type").unwrap_or(&Value::Null);
            seen.push(name);
            roles.push(match name {
                "op" => {
                    let Kind::Enum(symbols) = kind(avro)? else {
                        return Err(bad("op is not an enum"));
                    };
                    let ops = symbols
                        .iter()
                        .map(|s| {
                            OP_NAMES
                                .iter()
                                .position(|n| n == s)
                                .map(|p| p as i64)
                                .ok_or_else(|| bad("operation"))
                        })
                        .collect::<PyResult<_>>()?;
                    Role::Op(ops)
                }
                "position" if type_name(avro) == Some("string") => Role::Position,
                "source_ts_ms" if type_name(avro) == Some("long") => Role::SourceTs,
                "key" => {
                    key_fields = columns_of(avro)?;
                    for column in &key_fields {
                        key_slots.push(keys.iter().position(|k| *k == column.name));
                    }
                    for (slot, key) in keys.iter().enumerate() {
                        let column = key_fields
                            .iter()
                            .find(|c| c.name == *key)
                            .ok_or_else(|| bad("key column"))?;
                        if !matches!(column.kind, Kind::Int | Kind::Long | Kind::Text | Kind::Uuid) {
                            return Err(bad(format!("key column {slot} of another kind")));
                        }
                    }
                    Role::Key
                }
                "after" => {
                    let (null, record) = nullable(avro)?;
                    if null != Some(0) {
                        return Err(bad("after is not [null, record]"));
                    }
                    row = Some(columns_of(record)?);
                    Role::After
                }
                "unchanged" => {
                    let (null, array) = nullable(avro)?;
                    let items = array.get("items").and_then(type_name);
                    if null != Some(0) || type_name(array) != Some("array") || items != Some("string") {
                        return Err(bad("unchanged is not [null, array of string]"));
                    }
                    Role::Unchanged
                }
                "position" | "source_ts_ms" => return Err(bad(format!("{name} of another type"))),
                _ => Role::Skip(node(avro)?),
            });
        }
        for wanted in ["op", "position", "source_ts_ms", "key", "after"] {
            if !seen.contains(&wanted) {
                return Err(bad(format!("no {wanted} field")));
            }
        }
        Ok(ChangeProgram {
            roles,
            key_fields,
            key_slots,
            keys: keys.len(),
            row: row.unwrap_or_default(),
        })
    }

    /// `(op index, position, source_ts_ms, key tuple, row start, unchanged)` of the change
    /// record `value[start:]`: op index in CREATE, UPDATE, DELETE, READ, TRUNCATE; row start
    /// -1 for no row; unchanged a tuple of names for an UPDATE that left some out, else None.
    /// None for a body the program does not read.
    fn decode<'py>(&self, py: Python<'py>, value: &[u8], start: usize) -> PyResult<Option<Bound<'py, PyTuple>>> {
        let Ok(decoded) = self.read(value, start) else {
            return Ok(None);
        };
        let key = if decoded.op == TRUNCATE {
            PyTuple::empty(py)
        } else {
            let mut items = Vec::with_capacity(self.keys);
            for value in &decoded.key {
                items.push(match value {
                    Some(KeyValue::Int(n)) => n.into_pyobject(py)?.into_any(),
                    Some(KeyValue::Text(s)) => s.into_pyobject(py)?.into_any(),
                    None => return Ok(None),
                });
            }
            PyTuple::new(py, items)?
        };
        let unchanged = match decoded.unchanged {
            Some(names) if decoded.op == UPDATE && !names.is_empty() => PyTuple::new(py, names)?.into_any(),
            _ => py.None().into_bound(py),
        };
        let row = decoded.row.map_or(-1, |at| at as i64);
        Ok(Some(PyTuple::new(
            py,
            [
                decoded.op.into_pyobject(py)?.into_any(),
                decoded.position.into_pyobject(py)?.into_any(),
                decoded.source_ts.into_pyobject(py)?.into_any(),
                key.into_any(),
                row.into_pyobject(py)?.into_any(),
                unchanged,
            ],
        )?))
    }

    /// The Arrow buffers of `targets` (`(column, Arrow type, a, b)`: `bool`, `int32`, `int64`,
    /// `float32`, `float64`, `date32`, `timestamp_us` (a: 1 with a time zone), `decimal128`
    /// (a, b: precision and scale), `string`, `large_string`, `binary`, `large_binary`, and
    /// `list:<one of those>` or `large_list:<one of those>` with the item's a and b) for `rows`, each a `(value, row start)`
    /// from :meth:`decode` or None (a null row): per target `(null count, validity, offsets,
    /// data, items)`, items None but for a list, where they are `(item count, (null count,
    /// validity, offsets, data))` of its items. None when a column's table type is not
    /// the one its Avro type maps to, or a row does not read.
    fn columns<'py>(
        &self,
        py: Python<'py>,
        rows: Vec<Option<(Bound<'py, PyBytes>, usize)>>,
        targets: Vec<Target>,
    ) -> PyResult<Option<Vec<Buffers<'py>>>> {
        let mut plans = Vec::with_capacity(targets.len());
        for (name, arrow, a, b) in &targets {
            let field = self.row.iter().position(|c| c.name == *name);
            let layout = match field {
                Some(f) => self.layout(&self.row[f].kind, arrow, *a, *b),
                None => plain_layout(arrow),
            };
            let Some(layout) = layout else {
                return Ok(None);
            };
            plans.push((field, layout));
        }
        let mut located = Vec::with_capacity(rows.len());
        for row in &rows {
            located.push(match row {
                None => None,
                Some((value, start)) => {
                    let body = value.as_bytes();
                    let mut ats = Vec::with_capacity(self.row.len());
                    let mut c = Cursor { data: body, at: *start };
                    if c.row(&self.row, Some(&mut ats)).is_err() {
                        return Ok(None);
                    }
                    Some((body, ats))
                }
            });
        }
        let mut out = Vec::with_capacity(plans.len());
        for (field, layout) in plans {
            let Ok(built) = self.column(&located, field, layout) else {
                return Ok(None);
            };
            let (nulls, validity, offsets, data) = buffers(py, &built, layout);
            let items = match (&built.items, layout) {
                (Some((count, items)), Layout::List(item_layout, _)) => {
                    Some((*count, buffers(py, items, *item_layout)))
                }
                _ => None,
            };
            out.push((nulls, validity, offsets, data, items));
        }
        Ok(Some(out))
    }
}

fn buffers<'py>(py: Python<'py>, built: &Built, layout: Layout) -> Items<'py> {
    let validity = (built.nulls > 0).then(|| PyBytes::new(py, &built.validity));
    let offsets = match layout {
        Layout::Var32 | Layout::List(_, false) => Some(PyBytes::new(py, &i32_bytes(&built.offsets32))),
        Layout::Var64 | Layout::List(_, true) => Some(PyBytes::new(py, &i64_bytes(&built.offsets64))),
        _ => None,
    };
    (built.nulls, validity, offsets, PyBytes::new(py, &built.data))
}

fn i32_bytes(values: &[i32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn i64_bytes(values: &[i64]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}
