//! Weight matrices as views over the model file's bytes (never copied).

use std::ops::Range;

use crate::error::{Error, Result};
use crate::gguf::{Gguf, TensorInfo};
use crate::quant::{self, QuantType};

/// A 2-D weight matrix stored row-major in one ggml type: `rows` rows of `cols` elements
/// (ggml's `ne[1]` and `ne[0]`), located by a byte range of the file.
#[derive(Debug, Clone)]
pub struct Matrix {
    /// The tensor's name in the file.
    pub name: String,
    pub ty: QuantType,
    pub rows: usize,
    pub cols: usize,
    /// Bytes of the file holding the data.
    pub range: Range<usize>,
    /// Bytes per row.
    pub row_bytes: usize,
}

impl Matrix {
    /// Rows `rows` of this matrix as a matrix of their own (a fused tensor's parts: Phi-3's
    /// Q/K/V and gate/up), named `name`.
    pub fn row_range(&self, rows: Range<usize>, name: &str) -> Matrix {
        assert!(
            rows.end <= self.rows,
            "rows {rows:?} of a {}-row matrix",
            self.rows
        );
        let start = self.range.start + rows.start * self.row_bytes;
        Matrix {
            name: name.to_owned(),
            ty: self.ty,
            rows: rows.len(),
            cols: self.cols,
            range: start..start + rows.len() * self.row_bytes,
            row_bytes: self.row_bytes,
        }
    }

    /// The view of tensor `name` in `gguf` (parsed from `file`), checked to be `rows × cols`
    /// (a 1-D tensor has one row) and to lie inside the file.
    pub fn find(
        gguf: &Gguf<'_>,
        file_len: usize,
        name: &str,
        rows: usize,
        cols: usize,
    ) -> Result<Self> {
        let info = find_info(gguf, name)?;
        let dims = &info.dims;
        let (c, r) = match dims.as_slice() {
            [c] => (*c, 1),
            [c, r] => (*c, *r),
            [c, r, rest @ ..] if rest.iter().all(|&d| d == 1) => (*c, *r),
            _ => {
                return Err(model_error(format!(
                    "tensor `{name}` has dimensions {dims:?}, expected 2"
                )))
            }
        };
        if (c, r) != (cols as u64, rows as u64) {
            return Err(model_error(format!(
                "tensor `{name}` is {c}×{r} (cols×rows), expected {cols}×{rows} from the metadata"
            )));
        }
        let ty = QuantType::from_ggml(info.ggml_type).ok_or_else(|| {
            model_error(format!(
                "tensor `{name}` has ggml type {}, which is not supported",
                info.ggml_type
            ))
        })?;
        let row_bytes = ty.row_bytes(cols)?;
        let size = row_bytes
            .checked_mul(rows)
            .ok_or_else(|| model_error(format!("tensor `{name}` is too large")))?;
        let start = usize::try_from(gguf.data_offset())
            .ok()
            .and_then(|d| d.checked_add(usize::try_from(info.offset).ok()?))
            .ok_or_else(|| model_error(format!("tensor `{name}` lies past the address space")))?;
        let end = start
            .checked_add(size)
            .filter(|&e| e <= file_len)
            .ok_or_else(|| model_error(format!("tensor `{name}` ({size} bytes at byte {start}) extends past the end of the file ({file_len} bytes)")))?;
        Ok(Matrix {
            name: name.to_owned(),
            ty,
            rows,
            cols,
            range: start..end,
            row_bytes,
        })
    }

    /// The bytes of row `r`.
    #[inline]
    pub fn row<'f>(&self, file: &'f [u8], r: usize) -> &'f [u8] {
        let at = self.range.start + r * self.row_bytes;
        &file[at..at + self.row_bytes]
    }

    /// Row `r` dequantized into `out` (`cols` values).
    pub fn dequantize_row(&self, file: &[u8], r: usize, out: &mut [f32]) {
        quant::dequantize_unchecked(self.ty, self.row(file, r), out);
    }

    /// The whole tensor dequantized (for small tensors: norms).
    pub fn to_f32(&self, file: &[u8]) -> Vec<f32> {
        let mut out = vec![0f32; self.rows * self.cols];
        quant::dequantize_unchecked(self.ty, &file[self.range.clone()], &mut out);
        out
    }

    /// The bytes of rows `rows`.
    #[inline]
    fn rows<'f>(&self, file: &'f [u8], rows: &Range<usize>) -> &'f [u8] {
        &file[self.range.start + rows.start * self.row_bytes..][..rows.len() * self.row_bytes]
    }

    /// `out[r] = row_r · x` for rows `rows` (a matrix-vector product over part of the rows).
    pub fn matvec_rows(&self, file: &[u8], x: &[f32], rows: Range<usize>, out: &mut [f32]) {
        debug_assert_eq!(x.len(), self.cols);
        quant::matvec(self.ty, self.rows(file, &rows), x, &mut out[..rows.len()]);
    }

    /// [`Matrix::matvec_rows`] with `x` rounded to 8 bits (`a`): integer dot products for a
    /// block type (see `quant/int8.rs`); float types (F32, F16, BF16) stay exact with `x`.
    pub(crate) fn matvec_rows_rounded(
        &self,
        file: &[u8],
        x: &[f32],
        a: &quant::Q8Activations,
        rows: Range<usize>,
        out: &mut [f32],
    ) {
        if self.ty.block_len() == 1 {
            return self.matvec_rows(file, x, rows, out);
        }
        quant::matvec_rounded(self.ty, self.rows(file, &rows), a, &mut out[..rows.len()]);
    }

    /// For `t` inputs `xs` (`t × cols`), `out_t[r - rows.start][i] = row_r · x_i`: rows
    /// `rows`, each dequantized once and multiplied with every input (prompt processing), the
    /// output transposed (`rows.len() × t`).
    pub fn matmul_rows_t(
        &self,
        file: &[u8],
        xs: &[f32],
        t: usize,
        rows: Range<usize>,
        out_t: &mut [f32],
    ) {
        debug_assert_eq!(xs.len(), t * self.cols);
        let n = rows.len();
        quant::matmul_t(self.ty, self.rows(file, &rows), xs, t, &mut out_t[..n * t]);
    }
}

fn find_info<'g, 'a>(gguf: &'g Gguf<'a>, name: &str) -> Result<&'g TensorInfo<'a>> {
    gguf.tensor(name)
        .ok_or_else(|| model_error(format!("the file has no tensor `{name}`")))
}

pub(crate) fn has_tensor(gguf: &Gguf<'_>, name: &str) -> bool {
    gguf.tensor(name).is_some()
}

pub(crate) fn model_error(message: String) -> Error {
    Error::invalid_input(format!("GGUF model: {message}")).with_param("model")
}
