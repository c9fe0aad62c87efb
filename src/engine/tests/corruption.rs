//! Damaged data, map and control files are reported with the file name
//! (and offset for data files), never a panic or silently wrong data.

use super::*;
use crate::error::EngineError;
use crate::store::image::UNIT;

fn fixture() -> (tempfile::TempDir, BTreeMap<Vec<u8>, Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 5, 1);
    for i in 0..4000 {
        t.insert(&key(i), &value(i, 0, 90)).unwrap();
    }
    e.checkpoint(0).unwrap();
    let c = contents(&t);
    (dir, c)
}

fn flip(path: &std::path::Path, at: u64) {
    let mut b = std::fs::read(path).unwrap();
    b[at as usize] ^= 0x20;
    std::fs::write(path, b).unwrap();
}

#[test]
fn damaged_page_image_is_an_error_naming_file_and_offset() {
    let (dir, _) = fixture();
    let data = dir.path().join("0").join("5");
    let len = std::fs::metadata(&data).unwrap().len();
    // Damage several images in turn; every full read must fail cleanly.
    for unit in [0, len / UNIT as u64 / 2, len / UNIT as u64 - 1] {
        let at = unit * UNIT as u64 + 40;
        flip(&data, at);
        let e = open(dir.path(), 16);
        let t = tree(&e, 5, 1);
        let scan: Result<Vec<_>, _> = t.scan().collect();
        let check = t.check();
        // The flipped byte may be padding after a short compressed image;
        // then nothing may be wrong at all.
        if let Err(err) = scan {
            match &err {
                EngineError::Corrupt { path, offset, .. } => {
                    assert_eq!(path, &data);
                    assert_eq!(offset % UNIT as u64, 0);
                    assert!(*offset <= at);
                }
                other => panic!("unexpected error {other}"),
            }
            assert!(
                err.to_string().contains("\"") && err.to_string().contains("offset"),
                "{err}"
            );
            assert!(check.is_err(), "checker missed the damaged page");
        } else {
            assert!(
                check.is_ok() || check.as_ref().unwrap_err().contains("checksum"),
                "{check:?}"
            );
        }
        drop(t);
        drop(e);
        flip(&data, at);
    }
    // Undamaged again: everything reads.
    let e = open(dir.path(), 16);
    assert_valid(&tree(&e, 5, 1));
}

#[test]
fn every_damaged_unit_start_is_detected() {
    let (dir, good) = fixture();
    let data = dir.path().join("0").join("5");
    let len = std::fs::metadata(&data).unwrap().len();
    let mut detected = 0;
    for unit in 0..len / UNIT as u64 {
        let at = unit * UNIT as u64 + 3; // inside a header if an image starts here
        flip(&data, at);
        let e = open(dir.path(), 16);
        let t = tree(&e, 5, 1);
        match t.scan().collect::<Result<BTreeMap<_, _>, _>>() {
            Err(EngineError::Corrupt { .. }) => detected += 1,
            Err(other) => panic!("unexpected error {other}"),
            Ok(c) => assert!(c == good, "damage at {at} changed the data silently"),
        }
        drop(t);
        drop(e);
        flip(&data, at);
    }
    assert!(detected > 0);
}

#[test]
fn truncated_data_file_is_reported_at_open() {
    let (dir, _) = fixture();
    let data = dir.path().join("0").join("5");
    let len = std::fs::metadata(&data).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(len - 512)
        .unwrap();
    match Engine::open(dir.path(), 16, Arc::new(StdIo::new())) {
        Err(EngineError::Corrupt { path, detail, .. }) => {
            assert_eq!(path, data);
            assert!(detail.contains("truncated"), "{detail}");
        }
        Err(e) => panic!("unexpected error {e}"),
        Ok(_) => panic!("a truncated data file was accepted"),
    }
}

#[test]
fn damaged_map_and_control_are_reported() {
    let (dir, _) = fixture();
    for name in ["0/5-1.map", "control"] {
        let p = dir.path().join(name);
        let orig = std::fs::read(&p).unwrap();
        for at in [0, orig.len() / 2, orig.len() - 1] {
            flip(&p, at as u64);
            match Engine::open(dir.path(), 16, Arc::new(StdIo::new())) {
                Err(EngineError::Corrupt { path, .. }) => assert_eq!(path, p),
                Err(e) => panic!("unexpected error {e}"),
                Ok(_) => panic!("damaged {name} (byte {at}) was accepted"),
            }
            std::fs::write(&p, &orig).unwrap();
        }
        std::fs::write(&p, &orig[..orig.len() / 2]).unwrap();
        assert!(matches!(
            Engine::open(dir.path(), 16, Arc::new(StdIo::new())),
            Err(EngineError::Corrupt { .. })
        ));
        std::fs::write(&p, &orig).unwrap();
    }
    let e = open(dir.path(), 16);
    assert_valid(&tree(&e, 5, 1));
}

#[test]
fn random_map_and_control_bytes_are_errors() {
    let mut rng = Rng(77);
    for _ in 0..3000 {
        let n = rng.below(200) as usize;
        let b: Vec<u8> = (0..n).map(|_| rng.next() as u8).collect();
        assert!(crate::store::map::TreeMap::decode(&b).is_err());
        assert!(crate::store::control::Control::decode(&b).is_err());
    }
}

#[test]
fn oversized_keys_and_items_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 1, -1);
    assert!(matches!(
        t.insert(&[1; 1025], b""),
        Err(EngineError::KeyTooLarge { .. })
    ));
    assert!(matches!(
        t.insert(b"k", &[0; 2600]),
        Err(EngineError::ItemTooLarge { .. })
    ));
    assert!(t.insert(&[1; 1024], &[0; 1500]).unwrap());
    assert!(matches!(
        e.open_tree(
            2,
            TreeOptions {
                compress: 23,
                ..Default::default()
            }
        ),
        Err(EngineError::BadCompression(23))
    ));
    assert_valid(&t);
}
