//! Matrix-vector (and, over several tokens, matrix-matrix) products with weights dequantized
//! inside the shader: `shaders/matvec.wgsl`, one kernel for every format it decodes.
//!
//! WGSL reads only 32-bit words, so weights are laid out for the GPU once, at upload
//! ([`repack`]): Q4_1 blocks (20 bytes) and F32 are bound as the file has them; Q8_0 (34
//! bytes) and Q4_0 (18 bytes) blocks get their f16 scale widened to an f32 word, which also
//! aligns them (36 and 20 bytes, +6% and +11%); F16 rows of odd length get a zero half; every
//! other block type (Q5_0, Q5_1, IQ4_NL, the K-quants) becomes units of codes, scales and
//! offsets ([`CODES_UNIT_WORDS`]).
//!
//! A matrix larger than one storage binding of the adapter (`maxStorageBufferBindingSize`,
//! 128 MiB by WebGPU's default, less on some phones) is uploaded as row chunks, each its own
//! buffer, and every kernel over it dispatches once per chunk; a matrix that fits is one chunk,
//! so one dispatch as before.

use super::ops::Sink;
use super::{kernel, Context, ErrorScope, Kernel};
use crate::error::{Error, Result};
use crate::quant::{self, QuantType};

/// A weight matrix on the GPU: `rows` outputs, `cols` inputs, in its repacked layout.
#[derive(Debug)]
pub struct Matrix {
    /// Consecutive row ranges covering all rows, each in a buffer no larger than one storage
    /// binding.
    chunks: Vec<RowChunk>,
    format: QuantType,
    rows: usize,
    cols: usize,
}

/// Rows `first_row..first_row + rows` of a [`Matrix`], in a buffer of their own.
#[derive(Debug)]
struct RowChunk {
    buffer: wgpu::Buffer,
    first_row: usize,
    rows: usize,
}

impl Matrix {
    /// Output size.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// Input size.
    pub fn cols(&self) -> usize {
        self.cols
    }

    /// The weights' format.
    pub fn format(&self) -> QuantType {
        self.format
    }

    /// Buffers the rows are split into: 1 unless the matrix exceeds a storage binding.
    pub fn chunks(&self) -> usize {
        self.chunks.len()
    }
}

/// The shaders' code for `format` (`matvec.wgsl` and `embedding.wgsl` share the table) and
/// the words one row of `cols` weights takes in the uploaded layout.
fn gpu_layout(format: QuantType, cols: usize) -> Result<(u32, usize)> {
    Ok(match format {
        QuantType::F32 => (0, cols),
        QuantType::F16 => (1, cols.div_ceil(2)),
        QuantType::Q8_0 => (2, cols / 32 * 9),
        QuantType::Q4_0 => (3, cols / 32 * 5),
        QuantType::Q4_1 => (4, cols / 32 * 5),
        QuantType::BF16 => {
            return Err(Error::invalid_input(
                "BF16 weights have no GPU kernel yet (supported: F32, F16 and every block type)"
                    .to_string(),
            )
            .with_param("weights"))
        }
        // Q5_0, Q5_1, IQ4_NL and the K-quants: 32-weight units of 12 words (CODES_UNIT_WORDS).
        _ => (5, cols / 32 * CODES_UNIT_WORDS),
    })
}

/// Words of one 32-weight unit of the "codes" layout (format 5): per 16 weights a scale and
/// an offset as f32 (`sc0, sc1, mn0, mn1`), then the 32 unsigned codes as bytes, so that
/// weight `i` is `sc[i / 16]·code_i + mn[i / 16]` (`quant::decode_codes`). One decoder for
/// every type whose bits WGSL would need its own code for; the price is memory: 48 bytes per
/// 32 weights against 18–22 in Q4_K/Q5_0/Q6_K files (2.2–2.7×).
const CODES_UNIT_WORDS: usize = 12;

fn le16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le32(b: &[u8]) -> u32 {
    u32::from_le_bytes([b[0], b[1], b[2], b[3]])
}

/// Lays out `rows x cols` weights of `format` (the GGUF bytes, row-major) as the matvec
/// shaders read them. Pure and cheap: one pass over the bytes.
pub fn repack(format: QuantType, rows: usize, cols: usize, bytes: &[u8]) -> Result<Vec<u32>> {
    gpu_layout(format, cols)?;
    let row_bytes = format.row_bytes(cols)?;
    let expected = row_bytes.checked_mul(rows).ok_or_else(|| {
        Error::limit_exceeded(format!(
            "a {rows}x{cols} {} matrix overflows",
            format.name()
        ))
    })?;
    if bytes.len() != expected {
        return Err(Error::invalid_input(format!(
            "a {rows}x{cols} {} matrix is {expected} bytes, got {}",
            format.name(),
            bytes.len()
        ))
        .with_param("weights"));
    }
    let mut words = Vec::with_capacity(expected / 4 + rows + 1);
    match format {
        QuantType::F32 | QuantType::Q4_1 => words.extend(bytes.chunks_exact(4).map(le32)),
        QuantType::F16 => {
            for row in bytes.chunks_exact(row_bytes) {
                let mut pairs = row.chunks_exact(4);
                words.extend(pairs.by_ref().map(le32));
                if let [lo, hi] = *pairs.remainder() {
                    words.push(u32::from(u16::from_le_bytes([lo, hi])));
                }
            }
        }
        QuantType::Q8_0 | QuantType::Q4_0 => {
            for block in bytes.chunks_exact(format.block_bytes()) {
                words.push(quant::f16_to_f32(le16(block, 0)).to_bits());
                words.extend(block[2..].chunks_exact(4).map(le32));
            }
        }
        QuantType::BF16 => unreachable!("gpu_layout refused it"),
        _ => {
            let n = expected / format.block_bytes() * format.block_len();
            let (mut codes, mut sc, mut mn) =
                (vec![0u8; n], vec![0f32; n / 16], vec![0f32; n / 16]);
            quant::decode_codes(format, bytes, &mut codes, &mut sc, &mut mn);
            for ((codes, sc), mn) in codes
                .chunks_exact(32)
                .zip(sc.chunks_exact(2))
                .zip(mn.chunks_exact(2))
            {
                words.extend(sc.iter().chain(mn).map(|v| v.to_bits()));
                words.extend(codes.chunks_exact(4).map(le32));
            }
        }
    }
    Ok(words)
}

/// Bytes a `rows x cols` matrix of `format` takes on the GPU (its repacked layout); an error
/// for a format with no kernel.
pub(crate) fn gpu_bytes(format: QuantType, rows: usize, cols: usize) -> Result<u64> {
    let (_, row_words) = gpu_layout(format, cols)?;
    Ok(row_words as u64 * rows as u64 * 4)
}

impl Context {
    /// Rows of `row_bytes` each that one buffer may hold on this adapter (at least 1); an
    /// error when a single row is over the storage binding limit, as no split can bind it.
    pub(crate) fn rows_per_buffer(&self, row_bytes: u64) -> Result<usize> {
        if row_bytes > self.max_binding_bytes {
            return Err(Error::limit_exceeded(format!(
                "one row needs {row_bytes} bytes, over this adapter's limit of {} bytes for one \
                 buffer (maxStorageBufferBindingSize / maxBufferSize)",
                self.max_binding_bytes
            )));
        }
        // A zero-byte row (no columns) fits any number of times; one chunk then.
        Ok(self
            .max_binding_bytes
            .checked_div(row_bytes)
            .map_or(usize::MAX, |n| n.try_into().unwrap_or(usize::MAX)))
    }

    /// Uploads a weight matrix (GGUF bytes, row-major) in the layout its kernel reads, in
    /// row chunks of as many rows as one storage binding holds.
    pub fn upload_matrix(
        &self,
        name: &str,
        format: QuantType,
        rows: usize,
        cols: usize,
        bytes: &[u8],
    ) -> Result<Matrix> {
        let words = repack(format, rows, cols, bytes)?;
        let (_, row_words) = gpu_layout(format, cols)?;
        let rows_per_chunk = self
            .rows_per_buffer(row_words as u64 * 4)
            .map_err(|e| {
                Error::limit_exceeded(format!("weight matrix `{name}`: {}", e.message()))
                    .with_param("weights")
            })?
            .min(rows.max(1));
        let mut chunks = Vec::with_capacity(rows.div_ceil(rows_per_chunk));
        for first_row in (0..rows).step_by(rows_per_chunk) {
            let chunk_rows = rows_per_chunk.min(rows - first_row);
            let chunk_words = &words[first_row * row_words..][..chunk_rows * row_words];
            let label = if chunk_rows == rows {
                name.to_owned()
            } else {
                format!("{name}[{first_row}..{}]", first_row + chunk_rows)
            };
            let buffer = self.storage_buffer(
                &label,
                bytemuck::cast_slice(chunk_words),
                wgpu::BufferUsages::empty(),
            );
            super::WEIGHT_BYTES_UPLOADED
                .fetch_add(buffer.size(), std::sync::atomic::Ordering::Relaxed);
            chunks.push(RowChunk {
                buffer,
                first_row,
                rows: chunk_rows,
            });
        }
        Ok(Matrix {
            chunks,
            format,
            rows,
            cols,
        })
    }

    /// `y[t] = W x[t]` for each of `tokens` rows of `x` (`tokens * cols` values); returns
    /// `tokens * rows` values. Uploads `x` and reads `y` back (the forward pass keeps both
    /// on the GPU with [`Context::record_matvec`]).
    pub async fn matvec(&self, matrix: &Matrix, x: &[f32], tokens: usize) -> Result<Vec<f32>> {
        self.ensure_alive()?;
        if tokens == 0 || x.len() != tokens * matrix.cols {
            return Err(Error::invalid_input(format!(
                "{tokens} token(s) of {} inputs need {} values, got {}",
                matrix.cols,
                tokens * matrix.cols,
                x.len()
            ))
            .with_param("x"));
        }
        let y_bytes = (tokens * matrix.rows * 4) as u64;
        self.check_binding_size("matvec output", "x", y_bytes)?;
        let scope = ErrorScope::push(&self.device);
        let none = wgpu::BufferUsages::empty();
        let x_buffer = self.storage_buffer("matvec.x", bytemuck::cast_slice(x), none);
        let y_buffer = self.storage_buffer(
            "matvec.y",
            &vec![0; y_bytes as usize],
            wgpu::BufferUsages::COPY_SRC,
        );
        let readback = self.readback_buffer("matvec.readback", y_bytes);
        let mut encoder = self
            .device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("matvec"),
            });
        self.record_matvec(&mut encoder, matrix, &x_buffer, &y_buffer, tokens)
            .await?;
        encoder.copy_buffer_to_buffer(&y_buffer, 0, &readback, 0, y_bytes);
        self.submit(encoder.finish())?;
        scope.pop("running matvec").await?;
        let bytes = self.read_buffer(&readback).await?;
        Ok(bytemuck::cast_slice(&bytes).to_vec())
    }

    /// Records `y[t] = W x[t]` for `tokens` rows into `encoder`: one dispatch per row chunk,
    /// each writing its rows of every token's `y`.
    pub(crate) async fn record_matvec(
        &self,
        encoder: &mut impl Sink,
        matrix: &Matrix,
        x: &wgpu::Buffer,
        y: &wgpu::Buffer,
        tokens: usize,
    ) -> Result<()> {
        let max_groups = self.device.limits().max_compute_workgroups_per_dimension as usize;
        let (format, row_words) = gpu_layout(matrix.format, matrix.cols)?;
        for chunk in &matrix.chunks {
            let row_groups = chunk.rows.div_ceil(MATVEC_ROWS_PER_GROUP);
            let groups_x = row_groups.min(max_groups);
            let groups_y = row_groups.div_ceil(groups_x);
            if groups_y > max_groups || tokens > max_groups {
                return Err(Error::limit_exceeded(format!(
                    "{} rows x {tokens} tokens exceed this adapter's {max_groups} workgroups \
                     per dispatch dimension",
                    chunk.rows
                ))
                .with_param("x"));
            }
            // The chunk's place in `y` goes in the uniform rather than a binding offset: with
            // several tokens its outputs are `tokens` separate runs of `y` (row-major, token
            // by token), which no single offset binding covers, and offsets would also have
            // to be multiples of minStorageBufferOffsetAlignment (256 bytes).
            let params = [
                chunk.rows as u32,
                matrix.cols as u32,
                tokens as u32,
                groups_x as u32,
                format,
                row_words as u32,
                chunk.first_row as u32,
                matrix.rows as u32,
            ];
            let groups = (groups_x as u32, groups_y as u32, tokens as u32);
            self.record(encoder, MATVEC, &[&chunk.buffer, x, y], &params, groups)
                .await?;
        }
        Ok(())
    }

    /// Records `out[t] = dequantized row ids[t] of matrix` (the token embedding lookup): one
    /// dispatch per row chunk, each copying the rows whose id falls in its range. The ids
    /// are read on the GPU, so the host need not know them to pick a chunk.
    pub(crate) async fn record_embedding(
        &self,
        encoder: &mut impl Sink,
        matrix: &Matrix,
        ids: &wgpu::Buffer,
        out: &wgpu::Buffer,
        tokens: usize,
        scale: f32,
    ) -> Result<()> {
        let (code, row_words) = gpu_layout(matrix.format, matrix.cols)?;
        let groups = ((tokens * matrix.cols) as u32).div_ceil(64);
        for chunk in &matrix.chunks {
            let params = [
                matrix.cols as u32,
                tokens as u32,
                code,
                row_words as u32,
                chunk.first_row as u32,
                chunk.rows as u32,
                scale.to_bits(),
                0,
            ];
            self.record(
                encoder,
                EMBEDDING,
                &[&chunk.buffer, ids, out],
                &params,
                (groups, 1, 1),
            )
            .await?;
        }
        Ok(())
    }
}

pub(crate) const MATVEC: Kernel = kernel!("matvec");
/// Output rows per matvec workgroup; must equal `ROWS` in `shaders/matvec.wgsl`.
const MATVEC_ROWS_PER_GROUP: usize = 8;
pub(crate) const EMBEDDING: Kernel = kernel!("embedding");

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn q8_0_block_gets_an_f32_scale_word() {
        // d = 1.0 (f16 0x3c00), then 32 bytes 0..32.
        let mut block = vec![0x00, 0x3c];
        block.extend(0u8..32);
        let words = repack(QuantType::Q8_0, 1, 32, &block).unwrap();
        assert_eq!(words.len(), 9);
        assert_eq!(f32::from_bits(words[0]), 1.0);
        assert_eq!(words[1], u32::from_le_bytes([0, 1, 2, 3]));
    }

    #[test]
    fn odd_f16_rows_are_padded_to_a_word() {
        let bytes: Vec<u8> = (0u8..12).collect(); // 2 rows x 3 halves
        let words = repack(QuantType::F16, 2, 3, &bytes).unwrap();
        assert_eq!(words, vec![0x0302_0100, 0x0504, 0x0908_0706, 0x0b0a]);
    }

    #[test]
    fn wrong_sizes_and_formats_are_errors() {
        let err = repack(QuantType::Q4_1, 2, 32, &[0; 20]).unwrap_err();
        assert_eq!(err.to_string(), "a 2x32 Q4_1 matrix is 40 bytes, got 20");
        let err = repack(QuantType::BF16, 1, 256, &[0; 512]).unwrap_err();
        assert!(
            err.to_string()
                .starts_with("BF16 weights have no GPU kernel yet"),
            "{err}"
        );
    }

    /// Every type without a decoder of its own: the words hold, per 32 weights, scales and
    /// offsets and codes that give back the dequantized values.
    #[test]
    fn other_block_types_become_code_units() {
        for ty in quant::ALL_TYPES {
            if !matches!(gpu_layout(ty, 256), Ok((5, _))) {
                continue;
            }
            let (rows, cols) = (3, 512);
            let x: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
                .collect();
            let bytes = quant::quantize(ty, &x).unwrap();
            let words = repack(ty, rows, cols, &bytes).unwrap();
            assert_eq!(words.len(), rows * cols / 32 * CODES_UNIT_WORDS, "{ty:?}");
            let mut want = vec![0f32; rows * cols];
            quant::dequantize(ty, &bytes, &mut want).unwrap();
            for (u, unit) in words.chunks_exact(CODES_UNIT_WORDS).enumerate() {
                for i in 0..32 {
                    let code = (unit[4 + i / 4] >> (8 * (i % 4))) & 0xff;
                    let (sc, mn) = (
                        f32::from_bits(unit[i / 16]),
                        f32::from_bits(unit[2 + i / 16]),
                    );
                    let got = sc * code as f32 + mn;
                    let w = want[32 * u + i];
                    assert!(
                        (got - w).abs() <= 1e-6 * (1.0 + w.abs()),
                        "{ty:?} unit {u} weight {i}: {got} vs {w}"
                    );
                }
            }
        }
    }
}
