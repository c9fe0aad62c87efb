//! The control file `control`: which checkpoint is durable.
//!
//! ```text
//! 0 magic u32 "ORDC" | version u32 | checkpoint u64 | redo position u64 | crc32c u32
//! ```
//! It is replaced atomically (write a temporary file, sync, rename, sync the
//! directory): the rename is the moment a checkpoint becomes durable.

const MAGIC: u32 = u32::from_le_bytes(*b"ORDC");
const VERSION: u32 = 1;
pub const CONTROL_LEN: usize = 28;

/// Contents of the control file. Invariant: `checkpoint` names a checkpoint
/// whose map files were all durable before this was written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Control {
    pub checkpoint: u64,
    /// Opaque to the engine: the server stores the WAL position to replay from.
    pub redo: u64,
}

impl Control {
    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(CONTROL_LEN);
        b.extend_from_slice(&MAGIC.to_le_bytes());
        b.extend_from_slice(&VERSION.to_le_bytes());
        b.extend_from_slice(&self.checkpoint.to_le_bytes());
        b.extend_from_slice(&self.redo.to_le_bytes());
        let c = crc32c::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    pub fn decode(b: &[u8]) -> Result<Control, String> {
        if b.len() != CONTROL_LEN {
            return Err(format!(
                "control file has {} bytes, expected {CONTROL_LEN}",
                b.len()
            ));
        }
        if crc32c::crc32c(&b[..24]) != u32::from_le_bytes(b[24..28].try_into().unwrap()) {
            return Err("control file checksum mismatch".into());
        }
        if u32::from_le_bytes(b[0..4].try_into().unwrap()) != MAGIC {
            return Err("bad control file magic".into());
        }
        let v = u32::from_le_bytes(b[4..8].try_into().unwrap());
        if v != VERSION {
            return Err(format!("unsupported control file version {v}"));
        }
        Ok(Control {
            checkpoint: u64::from_le_bytes(b[8..16].try_into().unwrap()),
            redo: u64::from_le_bytes(b[16..24].try_into().unwrap()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_damage() {
        let c = Control {
            checkpoint: 42,
            redo: 0x1234_5678,
        };
        let b = c.encode();
        assert_eq!(Control::decode(&b), Ok(c));
        for at in 0..b.len() {
            let mut bad = b.clone();
            bad[at] ^= 0x80;
            assert!(Control::decode(&bad).is_err());
        }
        assert!(Control::decode(&b[..20]).is_err());
    }
}
