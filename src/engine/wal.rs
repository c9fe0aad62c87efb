//! Write-ahead logging, engine side: the record format, the sink the host
//! implements (in the server: `XLogInsert` with the extension's resource
//! manager), and redo.
//!
//! Records are logical and row-level — "tree T now maps key K to value V",
//! "K is gone", "T was created/dropped" — never page images: checkpoint
//! images are copy-on-write, so a page is never torn and structure changes
//! (splits, merges) are simply redone by replaying the row changes.
//!
//! Ordering: a tree modification logs its record while holding the leaf's
//! exclusive latch and the checkpoint barrier. So records of one key are in
//! the order their changes reached the page, and a checkpoint that asks the
//! sink for a redo point while holding the barrier exclusively splits the
//! log exactly: every change before it is in the image, none after it is.
//! Replaying from the redo point therefore yields the state at the end of
//! the log. Each record sets a final state, so replaying one twice is
//! harmless.
//!
//! ```text
//! kind u8 (1 create, 2 drop, 3 put, 4 delete, 5 row-id limit, 6 truncate) | db u32 | rel u32 |
//! compress i32 (create) | limit u64 (5) | klen u16 | key | vlen u32 | value (put) | crc32c u32
//! ```

use crate::id::TreeId;

/// Position of a record in the log (opaque to the engine; ordered).
pub type Lsn = u64;

/// Where the engine writes its log. Implementations must make a record
/// durable before the transaction that made it reports commit (the server's
/// WAL does that), and must be cheap: they run under page latches.
pub trait WalSink: Send + Sync {
    /// Appends an encoded record; returns its position.
    fn log(&self, record: &[u8]) -> Lsn;
    /// The redo point of checkpoint `checkpoint`, asked for while the
    /// checkpoint holds the barrier exclusively (no record is being
    /// logged). Every record logged before the call must precede the
    /// returned position and none logged after it may, and `flush` of it
    /// must succeed. A sink may log a record of its own to get such a
    /// position (the server logs a marker: an insert position can lie
    /// where its log refuses to flush to, `src/pg/wal.rs`); its replay
    /// must then ignore that record.
    fn redo_point(&self, checkpoint: u64) -> Lsn;
    /// Makes everything logged before `upto` durable.
    fn flush(&self, _upto: Lsn) {}
    /// Entered where the log and the tree must not part: around logging a
    /// change already made to a latched page (a failure to log would leave
    /// the tree with a change the log lacks), and from logging a truncation
    /// until its pages are freed (an error there is reported as
    /// [`Self::fatal`]). A server makes every error in between fatal:
    /// PostgreSQL's critical section.
    fn enter_critical(&self) {}
    fn leave_critical(&self) {}
    /// A logged change could not be applied: this process must not go on
    /// (the server PANICs, and recovery applies the change from the log).
    fn fatal(&self, what: &str) -> ! {
        panic!("{what}")
    }
}

/// One logged change.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Record {
    Create {
        tree: TreeId,
        compress: i32,
    },
    Drop {
        tree: TreeId,
    },
    Put {
        tree: TreeId,
        key: Vec<u8>,
        value: Vec<u8>,
    },
    Delete {
        tree: TreeId,
        key: Vec<u8>,
    },
    /// The tree was emptied (row ids keep counting).
    Truncate {
        tree: TreeId,
    },
    /// Row ids below `limit` may be in use from now on.
    IdLimit {
        tree: TreeId,
        limit: u64,
    },
}

impl Record {
    pub fn tree(&self) -> TreeId {
        match self {
            Record::Create { tree, .. }
            | Record::Drop { tree }
            | Record::Put { tree, .. }
            | Record::Delete { tree, .. }
            | Record::IdLimit { tree, .. }
            | Record::Truncate { tree } => *tree,
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut b = Vec::new();
        let (kind, tree) = match self {
            Record::Create { tree, .. } => (1u8, tree),
            Record::Drop { tree } => (2, tree),
            Record::Put { tree, .. } => (3, tree),
            Record::Delete { tree, .. } => (4, tree),
            Record::IdLimit { tree, .. } => (5, tree),
            Record::Truncate { tree } => (6, tree),
        };
        b.push(kind);
        b.extend_from_slice(&tree.db.to_le_bytes());
        b.extend_from_slice(&tree.rel.to_le_bytes());
        match self {
            Record::Create { compress, .. } => b.extend_from_slice(&compress.to_le_bytes()),
            Record::Drop { .. } | Record::Truncate { .. } => {}
            Record::IdLimit { limit, .. } => b.extend_from_slice(&limit.to_le_bytes()),
            Record::Put { key, value, .. } => {
                b.extend_from_slice(&(key.len() as u16).to_le_bytes());
                b.extend_from_slice(key);
                b.extend_from_slice(&(value.len() as u32).to_le_bytes());
                b.extend_from_slice(value);
            }
            Record::Delete { key, .. } => {
                b.extend_from_slice(&(key.len() as u16).to_le_bytes());
                b.extend_from_slice(key);
            }
        }
        let c = crc32c::crc32c(&b);
        b.extend_from_slice(&c.to_le_bytes());
        b
    }

    /// Decodes and checks a record; the error describes the damage.
    pub fn decode(b: &[u8]) -> Result<Record, String> {
        if b.len() < 13 {
            return Err(format!("log record of {} bytes is too short", b.len()));
        }
        let (body, crc) = b.split_at(b.len() - 4);
        if crc32c::crc32c(body) != u32::from_le_bytes(crc.try_into().unwrap()) {
            return Err("log record checksum mismatch".into());
        }
        let u32at = |o: usize| u32::from_le_bytes(body[o..o + 4].try_into().unwrap());
        let tree = TreeId::new(u32at(1), u32at(5));
        let mut at = 9;
        let take = |at: &mut usize, n: usize| -> Result<&[u8], String> {
            let s = body.get(*at..*at + n).ok_or("log record truncated")?;
            *at += n;
            Ok(s)
        };
        let rec = match body[0] {
            1 => Record::Create {
                tree,
                compress: i32::from_le_bytes(take(&mut at, 4)?.try_into().unwrap()),
            },
            2 => Record::Drop { tree },
            6 => Record::Truncate { tree },
            5 => Record::IdLimit {
                tree,
                limit: u64::from_le_bytes(take(&mut at, 8)?.try_into().unwrap()),
            },
            3 | 4 => {
                let kl = u16::from_le_bytes(take(&mut at, 2)?.try_into().unwrap()) as usize;
                let key = take(&mut at, kl)?.to_vec();
                if body[0] == 4 {
                    Record::Delete { tree, key }
                } else {
                    let vl = u32::from_le_bytes(take(&mut at, 4)?.try_into().unwrap()) as usize;
                    Record::Put {
                        tree,
                        key,
                        value: take(&mut at, vl)?.to_vec(),
                    }
                }
            }
            k => return Err(format!("unknown log record kind {k}")),
        };
        if at != body.len() {
            return Err("log record has trailing bytes".into());
        }
        Ok(rec)
    }
}

/// An in-memory log (tests, tools): positions are 1-based indexes.
#[derive(Default)]
pub struct MemWal {
    records: std::sync::Mutex<Vec<Vec<u8>>>,
}

impl MemWal {
    /// The position the next record will get.
    pub fn insert_position(&self) -> Lsn {
        self.records.lock().unwrap().len() as Lsn + 1
    }

    /// An independent copy of the log as it is now (tests: another
    /// "server" recovering from the same log, which its checkpoints may
    /// then extend).
    pub fn copy(&self) -> MemWal {
        MemWal {
            records: std::sync::Mutex::new(self.records.lock().unwrap().clone()),
        }
    }

    /// Records at or after `from`, in order.
    pub fn since(&self, from: Lsn) -> Vec<Vec<u8>> {
        let r = self.records.lock().unwrap();
        r[(from.max(1) - 1) as usize..].to_vec()
    }
}

impl WalSink for MemWal {
    fn log(&self, record: &[u8]) -> Lsn {
        let mut r = self.records.lock().unwrap();
        r.push(record.to_vec());
        r.len() as Lsn
    }
    fn redo_point(&self, _checkpoint: u64) -> Lsn {
        self.insert_position()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_roundtrip_and_damage_is_detected() {
        let t = TreeId::new(5, 16384);
        let recs = [
            Record::Create {
                tree: t,
                compress: 3,
            },
            Record::Drop { tree: t },
            Record::Put {
                tree: t,
                key: b"k1".to_vec(),
                value: vec![7; 300],
            },
            Record::Delete {
                tree: t,
                key: b"k1".to_vec(),
            },
            Record::IdLimit {
                tree: t,
                limit: 1 << 40,
            },
        ];
        for r in &recs {
            let b = r.encode();
            assert_eq!(&Record::decode(&b).unwrap(), r);
            for at in 0..b.len() {
                let mut bad = b.clone();
                bad[at] ^= 0x10;
                assert!(Record::decode(&bad).is_err(), "{r:?}: flip at {at}");
            }
            for cut in 0..b.len() {
                assert!(Record::decode(&b[..cut]).is_err());
            }
        }
    }
}
