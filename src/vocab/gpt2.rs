//! GPT-2's byte-level BPE alphabet: every byte is written as a printable character.
//!
//! Bytes `!`..=`~`, `¡`..=`¬` and `®`..=`ÿ` (188 of them) stand for themselves; the other 68
//! bytes (controls, space, DEL, NBSP, soft hyphen) are shifted to U+0100..=U+0143 in byte
//! order, so `Ġ` (U+0120) is a space and `Ċ` (U+010A) a newline.

/// Whether byte `b` is written as the character with the same code point.
fn is_direct(b: u8) -> bool {
    matches!(b, b'!'..=b'~' | 0xA1..=0xAC | 0xAE..=0xFF)
}

/// Characters U+0100.. in order, each standing for the next byte that is not direct.
fn shifted_bytes() -> [u8; 68] {
    let mut out = [0u8; 68];
    let mut n = 0;
    for b in 0..=255u8 {
        if !is_direct(b) {
            out[n] = b;
            n += 1;
        }
    }
    out
}

/// Decodes a byte-level token text to its bytes; `None` if a character is not in the table.
pub(crate) fn decode(text: &str, shifted: &[u8; 68]) -> Option<Vec<u8>> {
    text.chars()
        .map(|c| {
            let cp = c as u32;
            if cp < 256 && is_direct(cp as u8) {
                Some(cp as u8)
            } else {
                shifted.get(cp.checked_sub(256)? as usize).copied()
            }
        })
        .collect()
}

/// The table, built once per vocabulary.
pub(crate) fn table() -> [u8; 68] {
    shifted_bytes()
}

/// Encodes bytes as byte-level token text (the inverse of [`decode`]; for tests and tools).
pub fn encode(bytes: &[u8]) -> String {
    let shifted = shifted_bytes();
    bytes
        .iter()
        .map(|&b| {
            if is_direct(b) {
                b as char
            } else {
                let i = shifted
                    .iter()
                    .position(|&s| s == b)
                    .expect("every byte is in the table");
                char::from_u32(256 + i as u32).expect("U+0100..U+0143 are chars")
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_characters_decode() {
        let t = table();
        assert_eq!(decode("Ġthe", &t).unwrap(), b" the");
        assert_eq!(decode("Ċ", &t).unwrap(), b"\n");
        assert_eq!(decode("Ā", &t).unwrap(), b"\0");
        // "é" in UTF-8 is C3 A9, written "Ã©"; each half alone is one byte.
        assert_eq!(decode("Ã©", &t).unwrap(), "é".as_bytes());
        assert_eq!(decode("Ã", &t).unwrap(), vec![0xC3]);
        assert_eq!(decode("▁", &t), None);
    }

    #[test]
    fn every_byte_round_trips() {
        let all: Vec<u8> = (0..=255).collect();
        let text = encode(&all);
        assert_eq!(text.chars().count(), 256);
        assert_eq!(decode(&text, &table()).unwrap(), all);
    }
}
