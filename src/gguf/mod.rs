//! GGUF: the header of a llama.cpp model file, read without touching tensor data.
//!
//! A GGUF file is a header (magic `GGUF`, version, tensor count, metadata count), typed
//! key/value metadata, one info record per tensor (name, dimensions, ggml type, offset), padding
//! to `general.alignment` (default 32), then the tensor data. [`Gguf::parse`] reads everything
//! up to the data and borrows strings from the input, so reading the 49,152-token vocabulary
//! of a 98 MB model allocates a few MB and copies no token text.
//!
//! Versions 2 and 3 (little-endian) are read; they differ only in what they promise about
//! byte order. Every read is bounds-checked: a truncated or malformed file is an
//! `invalid_input` error naming the byte offset and what was expected there, and no count read
//! from the file is trusted for an allocation: a count is checked against the bytes left
//! before anything is reserved, and the numbers of metadata entries and tensors are bounded
//! ([`GGUF_MAX_METADATA_ENTRIES`], [`GGUF_MAX_TENSORS`]).
//!
//! Arrays are not decoded while parsing: an [`Array`] keeps its element type, length and the
//! bytes of its elements (checked once, element by element, without allocating) and decodes
//! an element when it is read, so the 49,152 tokens of a vocabulary cost one 40-byte value
//! until the tokenizer walks them. Keys and tensor names are found through sorted indexes
//! (a lookup is a binary search, the duplicate check one sort), so a header of many keys
//! parses in `O(n log n)`.
//!
//! [`Builder`] writes GGUF files; tests use it to build small synthetic models.

use crate::error::{Error, Result};
use crate::limits::{GGUF_MAX_ARRAY_DEPTH, GGUF_MAX_METADATA_ENTRIES, GGUF_MAX_TENSORS};

/// The 4-byte magic at the start of every GGUF file.
pub const MAGIC: [u8; 4] = *b"GGUF";

/// Alignment of the tensor data when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: u64 = 32;

/// ggml allows at most 4 dimensions per tensor.
const MAX_DIMS: u32 = 4;

/// The type tag of a metadata value, as stored in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    U8,
    I8,
    U16,
    I16,
    U32,
    I32,
    F32,
    Bool,
    String,
    Array,
    U64,
    I64,
    F64,
}

impl ValueType {
    fn from_u32(tag: u32) -> Option<Self> {
        use ValueType::*;
        Some(match tag {
            0 => U8,
            1 => I8,
            2 => U16,
            3 => I16,
            4 => U32,
            5 => I32,
            6 => F32,
            7 => Bool,
            8 => String,
            9 => Array,
            10 => U64,
            11 => I64,
            12 => F64,
            _ => return None,
        })
    }

    /// The tag written in the file.
    pub fn tag(self) -> u32 {
        use ValueType::*;
        match self {
            U8 => 0,
            I8 => 1,
            U16 => 2,
            I16 => 3,
            U32 => 4,
            I32 => 5,
            F32 => 6,
            Bool => 7,
            String => 8,
            Array => 9,
            U64 => 10,
            I64 => 11,
            F64 => 12,
        }
    }

    /// The bytes of one value of a fixed-size type (`None` for strings and arrays).
    pub fn fixed_size(self) -> Option<usize> {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => Some(1),
            U16 | I16 => Some(2),
            U32 | I32 | F32 => Some(4),
            U64 | I64 | F64 => Some(8),
            String | Array => None,
        }
    }

    /// The fewest bytes one value of this type takes (a string is at least its length field,
    /// an array its type and count), used to check counts against the bytes left.
    fn min_size(self) -> usize {
        use ValueType::*;
        match self {
            U8 | I8 | Bool => 1,
            U16 | I16 => 2,
            U32 | I32 | F32 => 4,
            U64 | I64 | F64 | String => 8,
            Array => 12,
        }
    }

    fn name(self) -> &'static str {
        use ValueType::*;
        match self {
            U8 => "u8",
            I8 => "i8",
            U16 => "u16",
            I16 => "i16",
            U32 => "u32",
            I32 => "i32",
            F32 => "f32",
            Bool => "bool",
            String => "string",
            Array => "array",
            U64 => "u64",
            I64 => "i64",
            F64 => "f64",
        }
    }
}

/// A metadata value; strings borrow the file's bytes (GGUF promises UTF-8 but the reader does
/// not check values, only keys and tensor names; see [`Value::as_str`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Value<'a> {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    String(&'a [u8]),
    /// An array, decoded element by element on access.
    Array(Array<'a>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl<'a> Value<'a> {
    /// The type tag of this value.
    pub fn value_type(&self) -> ValueType {
        match self {
            Value::U8(_) => ValueType::U8,
            Value::I8(_) => ValueType::I8,
            Value::U16(_) => ValueType::U16,
            Value::I16(_) => ValueType::I16,
            Value::U32(_) => ValueType::U32,
            Value::I32(_) => ValueType::I32,
            Value::F32(_) => ValueType::F32,
            Value::Bool(_) => ValueType::Bool,
            Value::String(_) => ValueType::String,
            Value::Array(_) => ValueType::Array,
            Value::U64(_) => ValueType::U64,
            Value::I64(_) => ValueType::I64,
            Value::F64(_) => ValueType::F64,
        }
    }

    /// Any integer type that fits in a `u64` (negative values do not).
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v.into()),
            Value::U16(v) => Some(v.into()),
            Value::U32(v) => Some(v.into()),
            Value::U64(v) => Some(v),
            Value::I8(v) => u64::try_from(v).ok(),
            Value::I16(v) => u64::try_from(v).ok(),
            Value::I32(v) => u64::try_from(v).ok(),
            Value::I64(v) => u64::try_from(v).ok(),
            _ => None,
        }
    }

    /// Any integer type as an `i64` (a `u64` above `i64::MAX` does not fit).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::U64(v) => i64::try_from(v).ok(),
            Value::I8(v) => Some(v.into()),
            Value::I16(v) => Some(v.into()),
            Value::I32(v) => Some(v.into()),
            Value::I64(v) => Some(v),
            _ => self.as_u64().and_then(|v| i64::try_from(v).ok()),
        }
    }

    /// The raw bytes of a string value.
    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// A string value that is valid UTF-8.
    pub fn as_str(&self) -> Option<&'a str> {
        self.as_bytes().and_then(|b| std::str::from_utf8(b).ok())
    }

    /// An array value.
    pub fn as_array(&self) -> Option<Array<'a>> {
        match self {
            Value::Array(a) => Some(*a),
            _ => None,
        }
    }
}

/// A metadata array: its element type (kept so an empty array still has one), its length and
/// the encoded bytes of its elements in the file, decoded on access.
///
/// Parsing checked every element (string lengths, bool bytes, nested arrays' types, lengths
/// and depth), so decoding cannot fail; an array of 10^7 `u8` costs this 40-byte value, not
/// 10^7 decoded ones. [`Array::get`] is `O(1)` for fixed-size elements and walks the elements
/// before `i` for strings and arrays; [`Array::iter`] decodes in order.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Array<'a> {
    elem: ValueType,
    len: usize,
    bytes: &'a [u8],
}

impl<'a> Array<'a> {
    /// The type of every element.
    pub fn elem_type(&self) -> ValueType {
        self.elem
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The elements' bytes as stored in the file.
    pub fn encoded(&self) -> &'a [u8] {
        self.bytes
    }

    /// The elements in order, decoded one at a time.
    pub fn iter(&self) -> ArrayIter<'a> {
        ArrayIter {
            elem: self.elem,
            left: self.len,
            reader: Reader {
                bytes: self.bytes,
                pos: 0,
            },
        }
    }

    /// Element `i`, or `None` past the end.
    pub fn get(&self, i: usize) -> Option<Value<'a>> {
        if i >= self.len {
            return None;
        }
        match self.elem.fixed_size() {
            Some(size) => {
                let mut reader = Reader {
                    bytes: self.bytes.get(i.checked_mul(size)?..)?,
                    pos: 0,
                };
                reader.value(self.elem, "", 0).ok()
            }
            None => self.iter().nth(i),
        }
    }
}

impl<'a> IntoIterator for Array<'a> {
    type Item = Value<'a>;
    type IntoIter = ArrayIter<'a>;

    fn into_iter(self) -> ArrayIter<'a> {
        self.iter()
    }
}

/// The elements of an [`Array`], decoded in order.
#[derive(Debug, Clone)]
pub struct ArrayIter<'a> {
    elem: ValueType,
    left: usize,
    reader: Reader<'a>,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        if self.left == 0 {
            return None;
        }
        self.left -= 1;
        // The elements were checked when the file was parsed, so this does not fail; if it
        // did, the iteration would end early rather than panic.
        let value = self.reader.value(self.elem, "", 0).ok();
        if value.is_none() {
            self.left = 0;
        }
        value
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.left, Some(self.left))
    }
}

impl ExactSizeIterator for ArrayIter<'_> {}

/// One tensor's info record: where its data lies, never the data itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TensorInfo<'a> {
    /// The tensor's name, e.g. `blk.0.attn_q.weight`.
    pub name: &'a str,
    /// Dimensions, innermost (contiguous) first, as ggml stores them.
    pub dims: Vec<u64>,
    /// The ggml type id (0 = F32, 1 = F16, 2 = Q4_0, 3 = Q4_1, 8 = Q8_0, 12 = Q4_K, ...).
    pub ggml_type: u32,
    /// Offset of the data from the start of the data section (a multiple of the alignment).
    pub offset: u64,
}

impl TensorInfo<'_> {
    /// Number of elements (the product of the dimensions).
    pub fn element_count(&self) -> u64 {
        self.dims.iter().product()
    }

    /// Bytes of data this tensor takes, when its ggml type is one this reader knows;
    /// `None` for an unknown type or a first dimension that is not a whole number of blocks.
    pub fn byte_size(&self) -> Option<u64> {
        let (block, type_size) = ggml_type_block(self.ggml_type)?;
        let first = *self.dims.first().unwrap_or(&1);
        if !first.is_multiple_of(block) {
            return None;
        }
        let rest: u64 = self
            .dims
            .iter()
            .skip(1)
            .try_fold(1u64, |acc, &d| acc.checked_mul(d))?;
        (first / block).checked_mul(type_size)?.checked_mul(rest)
    }
}

/// `(elements per block, bytes per block)` of the ggml types in use (ggml's `type_traits`).
pub fn ggml_type_block(ggml_type: u32) -> Option<(u64, u64)> {
    Some(match ggml_type {
        0 => (1, 4),      // F32
        1 => (1, 2),      // F16
        2 => (32, 18),    // Q4_0
        3 => (32, 20),    // Q4_1
        6 => (32, 22),    // Q5_0
        7 => (32, 24),    // Q5_1
        8 => (32, 34),    // Q8_0
        9 => (32, 36),    // Q8_1
        10 => (256, 84),  // Q2_K
        11 => (256, 110), // Q3_K
        12 => (256, 144), // Q4_K
        13 => (256, 176), // Q5_K
        14 => (256, 210), // Q6_K
        15 => (256, 292), // Q8_K
        16 => (256, 66),  // IQ2_XXS
        17 => (256, 74),  // IQ2_XS
        18 => (256, 98),  // IQ3_XXS
        19 => (256, 50),  // IQ1_S
        20 => (32, 18),   // IQ4_NL
        21 => (256, 110), // IQ3_S
        22 => (256, 82),  // IQ2_S
        23 => (256, 136), // IQ4_XS
        24 => (1, 1),     // I8
        25 => (1, 2),     // I16
        26 => (1, 4),     // I32
        27 => (1, 8),     // I64
        28 => (1, 8),     // F64
        29 => (256, 56),  // IQ1_M
        30 => (1, 2),     // BF16
        34 => (256, 54),  // TQ1_0
        35 => (256, 66),  // TQ2_0
        39 => (32, 17),   // MXFP4
        _ => return None,
    })
}

/// A parsed GGUF header: metadata and tensor infos, borrowing from the file's bytes.
#[derive(Debug, Clone)]
pub struct Gguf<'a> {
    version: u32,
    metadata: Vec<(&'a str, Value<'a>)>,
    /// Indexes into `metadata`, sorted by key (keys are unique).
    key_index: Vec<usize>,
    tensors: Vec<TensorInfo<'a>>,
    /// Indexes into `tensors`, sorted by name (names are unique).
    tensor_index: Vec<usize>,
    alignment: u64,
    data_offset: u64,
}

impl<'a> Gguf<'a> {
    /// Parses the header of a whole GGUF file and checks that every tensor of a known ggml
    /// type lies inside the file. Tensor data is never read.
    pub fn parse(file: &'a [u8]) -> Result<Self> {
        let gguf = Self::parse_metadata(file)?;
        let data_len = (file.len() as u64).saturating_sub(gguf.data_offset);
        for t in &gguf.tensors {
            let Some(size) = t.byte_size() else { continue };
            let end = t.offset.checked_add(size);
            if end.is_none_or(|end| end > data_len) {
                return Err(gguf_error(format!(
                    "tensor `{}` ({} bytes at data offset {}) extends past the end of the file \
                     ({} bytes, data from byte {})",
                    t.name,
                    size,
                    t.offset,
                    file.len(),
                    gguf.data_offset
                )));
            }
        }
        Ok(gguf)
    }

    /// Parses the header from a prefix of a GGUF file (at least up to the tensor data),
    /// without checking tensor extents against the file length.
    pub fn parse_metadata(bytes: &'a [u8]) -> Result<Self> {
        let mut r = Reader { bytes, pos: 0 };
        let magic = r.take(4, &|| "the magic `GGUF`".into())?;
        if magic != MAGIC {
            return Err(r.invalid_at(0, "the magic `GGUF`", &format!("{magic:02x?}")));
        }
        let version = r.u32(&|| "the version".into())?;
        match version {
            2 | 3 => {}
            1 => return Err(r.invalid_at(4, "version 2 or 3", "version 1 (not supported)")),
            v if v.swap_bytes() == 2 || v.swap_bytes() == 3 => {
                return Err(r.invalid_at(4, "version 2 or 3", "a big-endian file (not supported)"))
            }
            v => return Err(r.invalid_at(4, "version 2 or 3", &format!("version {v}"))),
        }
        let tensor_count = r.u64(&|| "the tensor count".into())?;
        let kv_count = r.u64(&|| "the metadata count".into())?;
        if kv_count > GGUF_MAX_METADATA_ENTRIES {
            return Err(Error::limit_exceeded(format!(
                "GGUF: the metadata count {kv_count} (at byte 16) is over the limit of \
                 {GGUF_MAX_METADATA_ENTRIES} entries (GGUF_MAX_METADATA_ENTRIES)"
            )));
        }
        if tensor_count > GGUF_MAX_TENSORS {
            return Err(Error::limit_exceeded(format!(
                "GGUF: the tensor count {tensor_count} (at byte 8) is over the limit of \
                 {GGUF_MAX_TENSORS} tensors (GGUF_MAX_TENSORS)"
            )));
        }

        // Each key/value takes at least 8 (key length) + 4 (type) + 1 bytes.
        let cap = bounded_capacity(kv_count, r.remaining(), 13);
        let mut metadata: Vec<(&'a str, Value<'a>)> = Vec::with_capacity(cap);
        let mut key_offsets: Vec<usize> = Vec::with_capacity(cap);
        for i in 0..kv_count {
            let key_at = r.pos;
            let key = r.string(&|| format!("the key of metadata entry {i} of {kv_count}"))?;
            let key = std::str::from_utf8(key)
                .map_err(|_| r.invalid_at(key_at, "a UTF-8 metadata key", "invalid UTF-8"))?;
            let tag_at = r.pos;
            let tag = r.u32(&|| format!("the value type of metadata key `{key}`"))?;
            let ty = ValueType::from_u32(tag).ok_or_else(|| {
                r.invalid_at(
                    tag_at,
                    &format!("a value type (0-12) for `{key}`"),
                    &tag.to_string(),
                )
            })?;
            let value = r.value(ty, key, 0)?;
            metadata.push((key, value));
            key_offsets.push(key_at);
        }
        let key_index = sorted_index(&metadata, |(k, _)| k).map_err(|(_, later)| {
            r.invalid_at(
                key_offsets[later],
                "a new metadata key",
                &format!("`{}` again", metadata[later].0),
            )
        })?;
        drop(key_offsets);
        let lookup = |key: &str| {
            key_index
                .binary_search_by(|&i| metadata[i].0.cmp(key))
                .ok()
                .map(|at| &metadata[key_index[at]].1)
        };

        let mut alignment = DEFAULT_ALIGNMENT;
        if let Some(v) = lookup("general.alignment") {
            match v {
                Value::U32(a) if a.is_power_of_two() => alignment = u64::from(*a),
                other => {
                    return Err(gguf_error(format!(
                        "general.alignment must be a u32 power of two, got {other:?}"
                    )))
                }
            }
        }

        // Each tensor info takes at least 8 (name length) + 4 + 4 + 8 bytes.
        let cap = bounded_capacity(tensor_count, r.remaining(), 24);
        let mut tensors = Vec::with_capacity(cap);
        let mut name_offsets: Vec<usize> = Vec::with_capacity(cap);
        for i in 0..tensor_count {
            let what = || format!("tensor info {i} of {tensor_count}");
            let name_at = r.pos;
            let name = r.string(&|| format!("the name of {}", what()))?;
            let name = std::str::from_utf8(name)
                .map_err(|_| r.invalid_at(name_at, "a UTF-8 tensor name", "invalid UTF-8"))?;
            let dims_at = r.pos;
            let n_dims = r.u32(&|| format!("the dimension count of tensor `{name}`"))?;
            if n_dims > MAX_DIMS {
                return Err(r.invalid_at(
                    dims_at,
                    &format!("at most {MAX_DIMS} dimensions for tensor `{name}`"),
                    &n_dims.to_string(),
                ));
            }
            let mut dims = Vec::with_capacity(n_dims as usize);
            for d in 0..n_dims {
                dims.push(r.u64(&|| format!("dimension {d} of tensor `{name}`"))?);
            }
            if dims
                .iter()
                .try_fold(1u64, |acc, &d| acc.checked_mul(d))
                .is_none_or(|n| n > i64::MAX as u64)
            {
                return Err(r.invalid_at(
                    dims_at,
                    &format!("dimensions of tensor `{name}` whose product fits in an i64"),
                    &format!("{dims:?}"),
                ));
            }
            let ggml_type = r.u32(&|| format!("the ggml type of tensor `{name}`"))?;
            let offset_at = r.pos;
            let offset = r.u64(&|| format!("the data offset of tensor `{name}`"))?;
            if offset % alignment != 0 {
                return Err(r.invalid_at(
                    offset_at,
                    &format!("a data offset of tensor `{name}` aligned to {alignment} bytes"),
                    &offset.to_string(),
                ));
            }
            tensors.push(TensorInfo {
                name,
                dims,
                ggml_type,
                offset,
            });
            name_offsets.push(name_at);
        }
        let tensor_index = sorted_index(&tensors, |t| &t.name).map_err(|(_, later)| {
            r.invalid_at(
                name_offsets[later],
                "a new tensor name",
                &format!("`{}` again", tensors[later].name),
            )
        })?;

        let data_offset = (r.pos as u64).div_ceil(alignment) * alignment;
        Ok(Gguf {
            version,
            metadata,
            key_index,
            tensors,
            tensor_index,
            alignment,
            data_offset,
        })
    }

    /// The file's format version (2 or 3).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// All metadata in file order.
    pub fn metadata(&self) -> &[(&'a str, Value<'a>)] {
        &self.metadata
    }

    /// The value of a metadata key (a binary search of the sorted key index).
    pub fn get(&self, key: &str) -> Option<&Value<'a>> {
        self.key_index
            .binary_search_by(|&i| self.metadata[i].0.cmp(key))
            .ok()
            .map(|at| &self.metadata[self.key_index[at]].1)
    }

    /// Tensor infos in file order.
    pub fn tensors(&self) -> &[TensorInfo<'a>] {
        &self.tensors
    }

    /// The info of the tensor named `name` (a binary search of the sorted name index).
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo<'a>> {
        self.tensor_index
            .binary_search_by(|&i| self.tensors[i].name.cmp(name))
            .ok()
            .map(|at| &self.tensors[self.tensor_index[at]])
    }

    /// Alignment of the tensor data (`general.alignment`, default 32).
    pub fn alignment(&self) -> u64 {
        self.alignment
    }

    /// Byte offset in the file where the tensor data begins.
    pub fn data_offset(&self) -> u64 {
        self.data_offset
    }
}

/// The indexes of `items` sorted by `key` (ties in file order), or the indexes of the first
/// two items with the same key, in file order.
fn sorted_index<T>(
    items: &[T],
    key: impl Fn(&T) -> &&str,
) -> std::result::Result<Vec<usize>, (usize, usize)> {
    let mut index: Vec<usize> = (0..items.len()).collect();
    // Stable, so equal keys stay in file order; O(n log n) comparisons.
    index.sort_by(|&a, &b| key(&items[a]).cmp(key(&items[b])));
    match index
        .windows(2)
        .find(|w| key(&items[w[0]]) == key(&items[w[1]]))
    {
        Some(w) => Err((w[0], w[1])),
        None => Ok(index),
    }
}

/// Capacity for `count` items of at least `min_size` bytes each when `remaining` bytes are
/// left: a hostile count cannot make us allocate more than the file could hold.
fn bounded_capacity(count: u64, remaining: usize, min_size: usize) -> usize {
    usize::try_from(count)
        .unwrap_or(usize::MAX)
        .min(remaining / min_size)
}

fn gguf_error(message: String) -> Error {
    Error::invalid_input(format!("GGUF: {message}"))
}

#[derive(Debug, Clone)]
struct Reader<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn remaining(&self) -> usize {
        self.bytes.len() - self.pos
    }

    fn invalid_at(&self, at: usize, expected: &str, found: &str) -> Error {
        gguf_error(format!("at byte {at}: expected {expected}, found {found}"))
    }

    fn take(&mut self, n: usize, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        if n > self.remaining() {
            return Err(gguf_error(format!(
                "at byte {}: expected {} ({n} bytes), but the file ends after {} more bytes \
                 (truncated?)",
                self.pos,
                what(),
                self.remaining()
            )));
        }
        let out = &self.bytes[self.pos..self.pos + n];
        self.pos += n;
        Ok(out)
    }

    fn array<const N: usize>(&mut self, what: &dyn Fn() -> String) -> Result<[u8; N]> {
        let bytes = self.take(N, what)?;
        Ok(bytes.try_into().expect("take returned N bytes"))
    }

    fn u32(&mut self, what: &dyn Fn() -> String) -> Result<u32> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &dyn Fn() -> String) -> Result<u64> {
        self.array(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &dyn Fn() -> String) -> Result<&'a [u8]> {
        let at = self.pos;
        let len = self.u64(&|| format!("the length of {}", what()))?;
        match usize::try_from(len) {
            Ok(len) if len <= self.remaining() => self.take(len, what),
            _ => Err(gguf_error(format!(
                "at byte {at}: expected {} of {len} bytes, but the file ends after {} more bytes \
                 (truncated?)",
                what(),
                self.remaining()
            ))),
        }
    }

    fn value(&mut self, ty: ValueType, key: &str, depth: usize) -> Result<Value<'a>> {
        let what = || format!("a {} value of metadata key `{key}`", ty.name());
        Ok(match ty {
            ValueType::U8 => Value::U8(self.array::<1>(&what)?[0]),
            ValueType::I8 => Value::I8(i8::from_le_bytes(self.array(&what)?)),
            ValueType::U16 => Value::U16(u16::from_le_bytes(self.array(&what)?)),
            ValueType::I16 => Value::I16(i16::from_le_bytes(self.array(&what)?)),
            ValueType::U32 => Value::U32(u32::from_le_bytes(self.array(&what)?)),
            ValueType::I32 => Value::I32(i32::from_le_bytes(self.array(&what)?)),
            ValueType::F32 => Value::F32(f32::from_le_bytes(self.array(&what)?)),
            ValueType::U64 => Value::U64(u64::from_le_bytes(self.array(&what)?)),
            ValueType::I64 => Value::I64(i64::from_le_bytes(self.array(&what)?)),
            ValueType::F64 => Value::F64(f64::from_le_bytes(self.array(&what)?)),
            ValueType::Bool => {
                let at = self.pos;
                match self.array::<1>(&what)?[0] {
                    0 => Value::Bool(false),
                    1 => Value::Bool(true),
                    b => return Err(self.invalid_at(at, &what(), &format!("byte {b}"))),
                }
            }
            ValueType::String => Value::String(self.string(&what)?),
            ValueType::Array => {
                if depth >= GGUF_MAX_ARRAY_DEPTH {
                    return Err(self.invalid_at(
                        self.pos,
                        &format!("arrays nested at most {GGUF_MAX_ARRAY_DEPTH} deep in `{key}`"),
                        "a deeper array",
                    ));
                }
                let tag_at = self.pos;
                let tag = self.u32(&|| format!("the element type of array `{key}`"))?;
                let elem = ValueType::from_u32(tag).ok_or_else(|| {
                    self.invalid_at(
                        tag_at,
                        &format!("an element type (0-12) for array `{key}`"),
                        &tag.to_string(),
                    )
                })?;
                let count = self.u64(&|| format!("the length of array `{key}`"))?;
                // Checked before anything is read: every element takes at least `min_size`.
                let len = bounded_capacity(count, self.remaining(), elem.min_size());
                if (len as u64) < count {
                    return Err(gguf_error(format!(
                        "at byte {}: expected {count} {} elements of array `{key}` (at least {} \
                         bytes), but the file ends after {} more bytes (truncated?)",
                        self.pos,
                        elem.name(),
                        count.saturating_mul(elem.min_size() as u64),
                        self.remaining()
                    )));
                }
                let start = self.pos;
                match elem.fixed_size() {
                    // `len * size` fits: it is at most the bytes left.
                    Some(size) if elem != ValueType::Bool => {
                        self.take(len * size, &|| format!("the elements of array `{key}`"))?;
                    }
                    // Strings, nested arrays and bools are checked one by one, allocating
                    // nothing: decoding them later cannot fail.
                    _ => {
                        for _ in 0..len {
                            self.value(elem, key, depth + 1)?;
                        }
                    }
                }
                Value::Array(Array {
                    elem,
                    len,
                    bytes: &self.bytes[start..self.pos],
                })
            }
        })
    }
}

/// Writes GGUF (version 3) files: metadata, tensor infos and zero-filled or given tensor data.
///
/// ```
/// use poot::gguf::{Builder, Gguf, Value};
/// let bytes = Builder::new().string("general.architecture", "llama").u32("x", 7).build();
/// let gguf = Gguf::parse(&bytes).unwrap();
/// assert_eq!(gguf.get("general.architecture").unwrap().as_str(), Some("llama"));
/// assert_eq!(gguf.get("x"), Some(&Value::U32(7)));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Builder {
    version: u32,
    metadata: Vec<u8>,
    kv_count: u64,
    tensors: Vec<(String, Vec<u64>, u32, Vec<u8>)>,
    alignment: u64,
}

impl Builder {
    /// An empty version-3 file with the default alignment.
    pub fn new() -> Self {
        Builder {
            version: 3,
            alignment: DEFAULT_ALIGNMENT,
            ..Default::default()
        }
    }

    /// Writes another version number in the header (to test the reader).
    pub fn version(mut self, version: u32) -> Self {
        self.version = version;
        self
    }

    fn key(&mut self, key: &str, ty: ValueType) {
        put_string(&mut self.metadata, key.as_bytes());
        self.metadata.extend_from_slice(&ty.tag().to_le_bytes());
        self.kv_count += 1;
    }

    /// Adds a metadata entry of any value.
    pub fn value(mut self, key: &str, value: &Value<'_>) -> Self {
        self.key(key, value.value_type());
        if let (Value::U32(a), "general.alignment") = (value, key) {
            self.alignment = u64::from(*a);
        }
        put_value(&mut self.metadata, value);
        self
    }

    /// Adds a `u32` entry.
    pub fn u32(self, key: &str, v: u32) -> Self {
        self.value(key, &Value::U32(v))
    }

    /// Adds a string entry.
    pub fn string(self, key: &str, v: &str) -> Self {
        self.value(key, &Value::String(v.as_bytes()))
    }

    /// Adds an array entry whose elements are `items`, each of type `elem` (not checked: a
    /// mismatch writes a file the reader refuses or misreads, which tests of the reader want).
    pub fn array(mut self, key: &str, elem: ValueType, items: &[Value<'_>]) -> Self {
        self.key(key, ValueType::Array);
        self.metadata.extend_from_slice(&elem.tag().to_le_bytes());
        self.metadata
            .extend_from_slice(&(items.len() as u64).to_le_bytes());
        for item in items {
            put_value(&mut self.metadata, item);
        }
        self
    }

    /// Adds an array-of-strings entry.
    pub fn strings<S: AsRef<[u8]>>(self, key: &str, items: &[S]) -> Self {
        let items: Vec<Value<'_>> = items.iter().map(|s| Value::String(s.as_ref())).collect();
        self.array(key, ValueType::String, &items)
    }

    /// Adds an array-of-i32 entry.
    pub fn i32s(self, key: &str, items: &[i32]) -> Self {
        let items: Vec<Value<'_>> = items.iter().map(|&v| Value::I32(v)).collect();
        self.array(key, ValueType::I32, &items)
    }

    /// Adds a tensor with the given data (its length is not checked against the type).
    pub fn tensor(mut self, name: &str, dims: &[u64], ggml_type: u32, data: Vec<u8>) -> Self {
        self.tensors
            .push((name.to_owned(), dims.to_vec(), ggml_type, data));
        self
    }

    /// The file's bytes.
    pub fn build(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&self.kv_count.to_le_bytes());
        out.extend_from_slice(&self.metadata);
        let align = self.alignment.max(1);
        let mut offset = 0u64;
        let mut offsets = Vec::new();
        for (name, dims, ty, data) in &self.tensors {
            put_string(&mut out, name.as_bytes());
            out.extend_from_slice(&(dims.len() as u32).to_le_bytes());
            for d in dims {
                out.extend_from_slice(&d.to_le_bytes());
            }
            out.extend_from_slice(&ty.to_le_bytes());
            out.extend_from_slice(&offset.to_le_bytes());
            offsets.push(offset);
            offset = (offset + data.len() as u64).div_ceil(align) * align;
        }
        let data_start = (out.len() as u64).div_ceil(align) * align;
        out.resize(data_start as usize, 0);
        for ((_, _, _, data), off) in self.tensors.iter().zip(offsets) {
            out.resize((data_start + off) as usize, 0);
            out.extend_from_slice(data);
        }
        out
    }
}

fn put_string(out: &mut Vec<u8>, s: &[u8]) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s);
}

fn put_value(out: &mut Vec<u8>, value: &Value<'_>) {
    match value {
        Value::U8(v) => out.push(*v),
        Value::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::Bool(v) => out.push(u8::from(*v)),
        Value::String(s) => put_string(out, s),
        Value::Array(a) => {
            out.extend_from_slice(&a.elem.tag().to_le_bytes());
            out.extend_from_slice(&(a.len as u64).to_le_bytes());
            out.extend_from_slice(a.bytes);
        }
        Value::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        Value::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The encoded elements of an array of `items`, for building nested arrays.
    fn encode(items: &[Value<'_>]) -> Vec<u8> {
        let mut out = Vec::new();
        for item in items {
            put_value(&mut out, item);
        }
        out
    }

    fn array<'a>(elem: ValueType, len: usize, bytes: &'a [u8]) -> Value<'a> {
        Value::Array(Array { elem, len, bytes })
    }

    fn all_types() -> Builder {
        let u8s = encode(&[Value::U8(1), Value::U8(2)]);
        let inner = [
            array(ValueType::U8, 2, &u8s),
            array(ValueType::String, 0, &[]),
        ];
        Builder::new()
            .value("u8", &Value::U8(200))
            .value("i8", &Value::I8(-5))
            .value("u16", &Value::U16(60000))
            .value("i16", &Value::I16(-300))
            .value("u32", &Value::U32(4_000_000_000))
            .value("i32", &Value::I32(-70000))
            .value("f32", &Value::F32(1.5))
            .value("bool", &Value::Bool(true))
            .value("str", &Value::String("héllo".as_bytes()))
            .value("u64", &Value::U64(u64::MAX))
            .value("i64", &Value::I64(i64::MIN))
            .value("f64", &Value::F64(-2.25))
            .array("nested", ValueType::Array, &inner)
            .tensor("w", &[32, 2], 3, vec![7; 40])
            .tensor("b", &[3], 0, vec![1; 12])
    }

    #[test]
    fn round_trips_every_value_type_and_tensor_infos() {
        let bytes = all_types().build();
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(g.version(), 3);
        assert_eq!(g.metadata().len(), 13);
        assert_eq!(g.get("u8"), Some(&Value::U8(200)));
        assert_eq!(g.get("i8").unwrap().as_i64(), Some(-5));
        assert_eq!(g.get("i8").unwrap().as_u64(), None);
        assert_eq!(g.get("u32").unwrap().as_u64(), Some(4_000_000_000));
        assert_eq!(g.get("f32"), Some(&Value::F32(1.5)));
        assert_eq!(g.get("bool"), Some(&Value::Bool(true)));
        assert_eq!(g.get("str").unwrap().as_str(), Some("héllo"));
        assert_eq!(g.get("u64").unwrap().as_u64(), Some(u64::MAX));
        assert_eq!(g.get("i64").unwrap().as_i64(), Some(i64::MIN));
        assert_eq!(g.get("f64"), Some(&Value::F64(-2.25)));
        let nested = g.get("nested").unwrap().as_array().unwrap();
        assert_eq!((nested.len(), nested.elem_type()), (2, ValueType::Array));
        let first = nested.get(0).unwrap().as_array().unwrap();
        assert_eq!(
            first.iter().collect::<Vec<_>>(),
            [Value::U8(1), Value::U8(2)]
        );
        assert_eq!(first.get(1), Some(Value::U8(2)));
        assert_eq!(first.get(2), None);
        let second = nested.get(1).unwrap().as_array().unwrap();
        assert_eq!((second.len(), second.elem_type()), (0, ValueType::String));
        assert_eq!(nested.iter().count(), 2);
        assert_eq!(g.tensors().len(), 2);
        let w = &g.tensors()[0];
        assert_eq!(
            (w.name, w.dims.as_slice(), w.ggml_type, w.offset),
            ("w", &[32, 2][..], 3, 0)
        );
        assert_eq!(w.byte_size(), Some(40));
        assert_eq!(g.tensors()[1].offset, 64);
        assert_eq!(g.data_offset() % 32, 0);
        assert_eq!(&bytes[g.data_offset() as usize..][..3], &[7, 7, 7]);
    }

    #[test]
    fn version_2_reads_and_other_versions_are_refused() {
        let bytes = Builder::new().version(2).u32("a", 1).build();
        assert_eq!(Gguf::parse(&bytes).unwrap().version(), 2);
        let err = Gguf::parse(&Builder::new().version(1).build()).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GGUF: at byte 4: expected version 2 or 3, found version 1 (not supported)"
        );
        let err = Gguf::parse(&Builder::new().version(3 << 24).build()).unwrap_err();
        assert!(err.to_string().contains("big-endian"), "{err}");
        let err = Gguf::parse(b"GGML\x03\0\0\0").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("GGUF: at byte 0: expected the magic `GGUF`"),
            "{err}"
        );
    }

    #[test]
    fn every_truncation_is_an_error_naming_the_offset() {
        let bytes = all_types().build();
        let header_end = Gguf::parse(&bytes).unwrap().data_offset() as usize;
        // Every prefix that cuts the header fails with a message, never a panic.
        for len in 0..header_end.min(bytes.len()) {
            let Err(err) = Gguf::parse_metadata(&bytes[..len]) else {
                // A cut inside the final alignment padding still leaves a whole header.
                assert!(len >= header_end - 32, "prefix of {len} bytes parsed");
                continue;
            };
            assert_eq!(err.code(), "invalid_input");
            let msg = err.to_string();
            assert!(msg.starts_with("GGUF: at byte "), "{msg}");
            assert!(msg.contains("expected"), "{msg}");
        }
        let err = Gguf::parse_metadata(&bytes[..30]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "GGUF: at byte 24: expected the length of the key of metadata entry 0 of 13 (8 bytes), \
             but the file ends after 6 more bytes (truncated?)"
        );
        // The whole-file parse also notices data cut short.
        let err = Gguf::parse(&bytes[..bytes.len() - 1]).unwrap_err();
        assert!(
            err.to_string()
                .contains("tensor `b` (12 bytes at data offset 64) extends past"),
            "{err}"
        );
    }

    #[test]
    fn hostile_counts_fail_without_allocating() {
        // A metadata count of u64::MAX with nothing after it: over the limit.
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        let err = Gguf::parse(&bytes).unwrap_err();
        assert!(err.is_limit_exceeded());
        assert_eq!(
            err.to_string(),
            "GGUF: the metadata count 18446744073709551615 (at byte 16) is over the limit of \
             65536 entries (GGUF_MAX_METADATA_ENTRIES)"
        );
        // Within the limit but past the bytes left: truncated.
        bytes[16..24].copy_from_slice(&GGUF_MAX_METADATA_ENTRIES.to_le_bytes());
        assert!(Gguf::parse(&bytes)
            .unwrap_err()
            .to_string()
            .contains("truncated"));
        // A tensor count of 2^40.
        bytes[8..16].copy_from_slice(&(1u64 << 40).to_le_bytes());
        let err = Gguf::parse(&bytes).unwrap_err();
        assert!(err.is_limit_exceeded());
        assert!(err.to_string().contains("GGUF_MAX_TENSORS"), "{err}");

        // An array claiming 2^62 strings.
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        put_string(&mut bytes, b"tokenizer.ggml.tokens");
        bytes.extend_from_slice(&9u32.to_le_bytes());
        bytes.extend_from_slice(&8u32.to_le_bytes());
        bytes.extend_from_slice(&(1u64 << 62).to_le_bytes());
        let err = Gguf::parse(&bytes).unwrap_err().to_string();
        assert!(
            err.contains(
                "expected 4611686018427387904 string elements of array `tokenizer.ggml.tokens`"
            ),
            "{err}"
        );

        // A string claiming u64::MAX bytes.
        let mut bytes = b"GGUF\x03\0\0\0".to_vec();
        bytes.extend_from_slice(&0u64.to_le_bytes());
        bytes.extend_from_slice(&1u64.to_le_bytes());
        bytes.extend_from_slice(&u64::MAX.to_le_bytes());
        let err = Gguf::parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("at byte 24: expected the key of metadata entry 0 of 1 of 18446744073709551615 bytes"), "{err}");
    }

    #[test]
    fn malformed_values_are_refused() {
        let bad_bool = {
            let mut b = Builder::new().value("flag", &Value::Bool(true)).build();
            b[24 + 8 + 4 + 4] = 2; // header, key length, key, type tag
            b
        };
        let err = Gguf::parse(&bad_bool).unwrap_err().to_string();
        assert!(
            err.contains("expected a bool value of metadata key `flag`, found byte 2"),
            "{err}"
        );

        let dup = Builder::new().u32("a", 1).u32("a", 2).build();
        assert!(Gguf::parse(&dup)
            .unwrap_err()
            .to_string()
            .contains("`a` again"));

        let bad_type = {
            let mut b = Builder::new().u32("a", 1).build();
            b[24 + 8 + 1] = 13; // header, key length, key
            b
        };
        let err = Gguf::parse(&bad_type).unwrap_err().to_string();
        assert!(
            err.contains("expected a value type (0-12) for `a`, found 13"),
            "{err}"
        );

        let bad_align = Builder::new()
            .value("general.alignment", &Value::U32(3))
            .build();
        assert!(Gguf::parse(&bad_align)
            .unwrap_err()
            .to_string()
            .contains("power of two"));

        let five_dims = Builder::new()
            .tensor("t", &[1, 1, 1, 1, 1], 0, vec![0; 4])
            .build();
        assert!(Gguf::parse(&five_dims)
            .unwrap_err()
            .to_string()
            .contains("at most 4 dimensions"));

        let overflow = Builder::new()
            .tensor("t", &[u64::MAX, 2], 0, vec![])
            .build();
        assert!(Gguf::parse(&overflow)
            .unwrap_err()
            .to_string()
            .contains("product fits"));

        // An array of one array of ... of one u8, nested `levels` deep.
        let nested = |levels: usize| {
            let (mut elem, mut bytes) = (ValueType::U8, vec![0u8]);
            for _ in 1..levels {
                bytes = encode(&[array(elem, 1, &bytes)]);
                elem = ValueType::Array;
            }
            let mut b = Builder::new();
            b.key("deep", ValueType::Array);
            put_value(&mut b.metadata, &array(elem, 1, &bytes));
            b.build()
        };
        let ok = nested(GGUF_MAX_ARRAY_DEPTH);
        let g = Gguf::parse(&ok).unwrap();
        let mut v = *g.get("deep").unwrap();
        for _ in 0..GGUF_MAX_ARRAY_DEPTH {
            v = v.as_array().unwrap().get(0).unwrap();
        }
        assert_eq!(v, Value::U8(0));
        let deep = nested(GGUF_MAX_ARRAY_DEPTH + 1);
        assert!(Gguf::parse(&deep)
            .unwrap_err()
            .to_string()
            .contains("nested at most 8 deep"));
    }

    /// A header of `n` keys `k0`, `k1`, ... (u8 values), then `extra` keys as given.
    fn many_keys(n: usize, extra: &[&str]) -> Vec<u8> {
        let mut b = Builder::new();
        for i in 0..n {
            b = b.value(&format!("k{i}"), &Value::U8(i as u8));
        }
        for k in extra {
            b = b.value(k, &Value::U8(0));
        }
        b.build()
    }

    #[test]
    fn many_keys_are_indexed_and_duplicates_found_by_sorting() {
        // The limit's worth of keys: a sort, not 2^31 comparisons.
        let n = GGUF_MAX_METADATA_ENTRIES as usize;
        let bytes = many_keys(n, &[]);
        // Its time is bounded in tests/hostile_inputs.rs (the core has no clock).
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(g.metadata().len(), n);
        for i in (0..n).step_by(997) {
            assert_eq!(g.get(&format!("k{i}")), Some(&Value::U8(i as u8)));
        }
        assert_eq!(g.get("k"), None);
        assert_eq!(g.get(&format!("k{n}")), None);

        // A duplicate as the last key is found, at its offset.
        let bytes = many_keys(n - 1, &["k7"]);
        let dup_at = 24
            + (0..n - 1)
                .map(|i| 8 + format!("k{i}").len() + 4 + 1)
                .sum::<usize>();
        let err = Gguf::parse(&bytes).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("GGUF: at byte {dup_at}: expected a new metadata key, found `k7` again")
        );
        // One more key than the limit is refused before any is read.
        let err = Gguf::parse(&many_keys(n + 1, &[])).unwrap_err();
        assert!(err.is_limit_exceeded(), "{err}");
    }

    #[test]
    fn arrays_are_decoded_on_access() {
        assert!(std::mem::size_of::<Value<'_>>() <= 48);
        // Ten million u8 elements: one value, no per-element allocation.
        let mut b = Builder::new();
        b.key("big", ValueType::Array);
        b.metadata
            .extend_from_slice(&ValueType::U8.tag().to_le_bytes());
        b.metadata.extend_from_slice(&10_000_000u64.to_le_bytes());
        b.metadata.extend((0..10_000_000u32).map(|i| i as u8));
        let bytes = b.strings("s", &["a", "", "ccc"]).build();
        let g = Gguf::parse(&bytes).unwrap();
        let big = g.get("big").unwrap().as_array().unwrap();
        assert_eq!((big.len(), big.elem_type()), (10_000_000, ValueType::U8));
        assert_eq!(big.encoded().len(), 10_000_000);
        assert_eq!(
            big.get(9_999_999),
            Some(Value::U8((9_999_999u32 % 256) as u8))
        );
        assert_eq!(big.get(10_000_000), None);
        assert_eq!(big.iter().len(), 10_000_000);
        let s = g.get("s").unwrap().as_array().unwrap();
        assert_eq!(s.get(2).unwrap().as_str(), Some("ccc"));
        let all: Vec<_> = s.iter().map(|v| v.as_str().unwrap()).collect();
        assert_eq!(all, ["a", "", "ccc"]);

        // Elements are checked while parsing: a bad bool inside an array is an error there.
        let mut bytes = Builder::new()
            .array(
                "flags",
                ValueType::Bool,
                &[Value::Bool(true), Value::Bool(false)],
            )
            .build();
        let at = 24 + 8 + 5 + 4 + 4 + 8 + 1; // header, key, tag, type, count, first element
        bytes[at] = 9;
        let err = Gguf::parse(&bytes).unwrap_err().to_string();
        assert!(
            err.contains(&format!("at byte {at}: expected a bool value")),
            "{err}"
        );
        // A string inside an array longer than the file.
        let mut bytes = Builder::new().strings("t", &["ab"]).build();
        let at = 24 + 8 + 1 + 4 + 4 + 8;
        bytes[at..at + 8].copy_from_slice(&(1u64 << 60).to_le_bytes());
        let err = Gguf::parse(&bytes).unwrap_err().to_string();
        assert!(err.contains("of 1152921504606846976 bytes"), "{err}");
    }

    #[test]
    fn tensors_are_indexed_by_name_and_names_are_unique() {
        let g_bytes = all_types().build();
        let g = Gguf::parse(&g_bytes).unwrap();
        assert_eq!(g.tensor("b").unwrap().dims, [3]);
        assert_eq!(g.tensor("w").unwrap().ggml_type, 3);
        assert!(g.tensor("x").is_none());
        let dup = Builder::new()
            .tensor("t", &[4], 0, vec![0; 16])
            .tensor("t", &[4], 0, vec![0; 16])
            .build();
        let err = Gguf::parse(&dup).unwrap_err().to_string();
        assert!(
            err.contains("expected a new tensor name, found `t` again"),
            "{err}"
        );
    }

    #[test]
    fn custom_alignment_is_honoured() {
        let bytes = Builder::new()
            .value("general.alignment", &Value::U32(64))
            .tensor("a", &[4], 0, vec![1; 16])
            .tensor("b", &[4], 0, vec![2; 16])
            .build();
        let g = Gguf::parse(&bytes).unwrap();
        assert_eq!(g.alignment(), 64);
        assert_eq!(g.data_offset() % 64, 0);
        assert_eq!(g.tensors()[1].offset, 64);
    }
}
