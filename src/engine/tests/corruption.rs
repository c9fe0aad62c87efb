//! Damaged data, map and control files are reported with the file name
//! (and offset for data files), never a panic or silently wrong data.

use super::*;
use crate::error::EngineError;
use crate::io::FileIo;
use crate::store::image::UNIT;

/// Tree 5 (4000 rows) and tree 6 (100 rows) in durable checkpoint 1;
/// returns tree 5's contents.
fn fixture() -> (tempfile::TempDir, BTreeMap<Vec<u8>, Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 16);
    let t = tree(&e, 5, 1);
    for i in 0..4000 {
        t.insert(&key(i), &value(i, 0, 90)).unwrap();
    }
    let other = tree(&e, 6, -1);
    for i in 0..100 {
        other.insert(&key(i), &value(i, 6, 40)).unwrap();
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

/// Opening damaged tree `id` (either way) fails with a `Corrupt` error
/// naming `path` and containing `needle`.
fn expect_damaged(e: &Engine, id: u32, path: &std::path::Path, needle: &str) {
    let opened = [
        e.tree(id).map(|_| ()),
        e.open_tree(id, TreeOptions::default()).map(|_| ()),
    ];
    for r in opened {
        match r {
            Err(EngineError::Corrupt {
                path: p, detail, ..
            }) => {
                assert_eq!(p, path, "{detail}");
                assert!(detail.contains(needle), "{detail}");
            }
            Err(other) => panic!("unexpected error {other}"),
            Ok(()) => panic!("damaged tree {id} was opened"),
        }
    }
}

/// Tree 6 of the fixture, read through a fresh handle: untouched by
/// damage to tree 5.
fn assert_other_tree_intact(e: &Engine, extra: usize) {
    let t = e.tree(6).unwrap();
    assert_valid(&t);
    assert_eq!(contents(&t).len(), 100 + extra);
}

#[test]
fn truncated_data_file_quarantines_only_its_tree() {
    let (dir, good) = fixture();
    let data = dir.path().join("0").join("5");
    let orig = std::fs::read(&data).unwrap();
    std::fs::write(&data, &orig[..orig.len() - 512]).unwrap();
    {
        let e = open(dir.path(), 16);
        let damage = e.take_load_damage();
        assert_eq!(damage.len(), 1, "{damage:?}");
        assert!(damage[0].to_string().contains("truncated"), "{}", damage[0]);
        assert!(e.take_load_damage().is_empty(), "reported once");
        expect_damaged(&e, 5, &data, "truncated");
        assert!(e.has_tree(5));
        assert_eq!(e.tree_ids().unwrap().len(), 2);
        // The other tree reads, writes and checkpoints as usual, and
        // checkpoints keep the damaged tree's files as they are.
        e.tree(6).unwrap().insert(b"new", b"row").unwrap();
        assert_eq!(e.checkpoint(0).unwrap(), 2);
        assert_eq!(e.checkpoint(0).unwrap(), 3);
        expect_damaged(&e, 5, &data, "truncated");
        assert_other_tree_intact(&e, 1);
    }
    assert_eq!(
        StdIo::new().list(&dir.path().join("0")).unwrap(),
        // A checkpoint writes maps only for trees that changed: tree 6's
        // of checkpoint 2 stays, and the damaged tree keeps its own.
        vec!["5", "5-1.map", "6", "6-2.map"]
    );
    assert_eq!(
        std::fs::metadata(&data).unwrap().len(),
        orig.len() as u64 - 512
    );
    {
        let e = open(dir.path(), 16);
        assert_eq!(e.take_load_damage().len(), 1);
        expect_damaged(&e, 5, &data, "truncated");
        assert_other_tree_intact(&e, 1);
    }
    // Repaired (the bytes restored), the tree loads from its kept map.
    std::fs::write(&data, &orig).unwrap();
    let e = open(dir.path(), 16);
    assert!(e.take_load_damage().is_empty());
    let t = tree(&e, 5, 1);
    assert!(contents(&t) == good);
    assert_valid(&t);
    t.upsert(b"after", b"repair").unwrap();
    e.checkpoint(0).unwrap();
    drop(t);
    drop(e);
    let e = open(dir.path(), 16);
    let t = e.tree(5).unwrap();
    assert_eq!(contents(&t).len(), good.len() + 1);
    assert_valid(&t);
}

#[test]
fn damaged_map_quarantines_only_its_tree() {
    let (dir, good) = fixture();
    let map = dir.path().join("0").join("5-1.map");
    let orig = std::fs::read(&map).unwrap();
    let flipped = |at: usize| {
        let mut b = orig.clone();
        b[at] ^= 0x20;
        b
    };
    let damages = [
        flipped(0),
        flipped(orig.len() / 2),
        flipped(orig.len() - 1),
        orig[..orig.len() / 2].to_vec(),
        Vec::new(),
    ];
    for bad in &damages {
        std::fs::write(&map, bad).unwrap();
        let e = open(dir.path(), 16);
        assert_eq!(e.take_load_damage().len(), 1);
        expect_damaged(&e, 5, &map, "map");
        assert_other_tree_intact(&e, 0);
        drop(e);
        std::fs::write(&map, &orig).unwrap();
    }
    // Damaged across a checkpoint: the control file keeps naming the
    // damaged map, so restoring its original bytes repairs the tree.
    std::fs::write(&map, &damages[1]).unwrap();
    let e = open(dir.path(), 16);
    assert_eq!(e.checkpoint(0).unwrap(), 2);
    expect_damaged(&e, 5, &map, "checksum");
    drop(e);
    assert_eq!(std::fs::read(&map).unwrap(), damages[1]);
    std::fs::write(&map, &orig).unwrap();
    let e = open(dir.path(), 16);
    assert!(e.take_load_damage().is_empty());
    let t = e.tree(5).unwrap();
    assert!(contents(&t) == good);
    assert_valid(&t);
}

#[test]
fn damaged_tree_can_be_dropped() {
    let (dir, _) = fixture();
    let map = dir.path().join("0").join("5-1.map");
    flip(&map, 50);
    let e = open(dir.path(), 16);
    e.drop_tree(5).unwrap();
    assert!(!e.has_tree(5));
    assert!(matches!(e.tree(5), Err(EngineError::NoSuchTree(_))));
    e.checkpoint(0).unwrap();
    assert_eq!(
        StdIo::new().list(&dir.path().join("0")).unwrap(),
        vec!["6", "6-1.map"]
    );
    // The id is free again.
    let t = tree(&e, 5, -1);
    t.insert(b"k", b"v").unwrap();
    assert_valid(&t);
}

#[test]
fn data_file_truncated_while_open_is_corruption() {
    let (dir, _) = fixture();
    let e = open(dir.path(), 16);
    let data = dir.path().join("0").join("5");
    std::fs::OpenOptions::new()
        .write(true)
        .open(&data)
        .unwrap()
        .set_len(UNIT as u64)
        .unwrap();
    let t = e.tree(5).unwrap();
    match t.scan().collect::<Result<Vec<_>, _>>() {
        Err(EngineError::Corrupt { path, detail, .. }) => {
            assert_eq!(path, data);
            assert!(detail.contains("truncated"), "{detail}");
        }
        Err(other) => panic!("unexpected error {other}"),
        Ok(_) => panic!("a truncated data file read without error"),
    }
}

#[test]
fn damaged_control_is_an_error_at_open_and_check() {
    let (dir, _) = fixture();
    let io = StdIo::new();
    let p = dir.path().join("control");
    let orig = std::fs::read(&p).unwrap();
    assert_eq!(
        Engine::check_control(dir.path(), &io)
            .unwrap()
            .map(|c| c.checkpoint),
        Some(1)
    );
    let mut damages: Vec<Vec<u8>> = [0, orig.len() / 2, orig.len() - 1]
        .iter()
        .map(|&at| {
            let mut b = orig.clone();
            b[at] ^= 0x80;
            b
        })
        .collect();
    damages.push(orig[..orig.len() / 2].to_vec());
    damages.push(Vec::new());
    for bad in &damages {
        std::fs::write(&p, bad).unwrap();
        for r in [
            Engine::open(dir.path(), 16, Arc::new(StdIo::new())).map(|_| ()),
            Engine::check_control(dir.path(), &io).map(|_| ()),
        ] {
            match r {
                Err(EngineError::Corrupt { path, .. }) => assert_eq!(path, p),
                Err(e) => panic!("unexpected error {e}"),
                Ok(_) => panic!("damaged control file {bad:?} was accepted"),
            }
        }
    }
    // Missing beside data files: loading would delete them all as leftovers.
    std::fs::remove_file(&p).unwrap();
    match Engine::check_control(dir.path(), &io) {
        Err(EngineError::Corrupt { path, detail, .. }) => {
            assert_eq!(path, p);
            assert!(detail.contains("missing"), "{detail}");
        }
        other => panic!("a missing control file beside data files: {other:?}"),
    }
    std::fs::write(&p, &orig).unwrap();
    assert_valid(&tree(&open(dir.path(), 16), 5, 1));
}

#[test]
fn new_directories_pass_the_control_check() {
    let io = StdIo::new();
    let dir = tempfile::tempdir().unwrap();
    assert!(Engine::check_control(dir.path().join("absent"), &io)
        .unwrap()
        .is_none());
    assert!(Engine::check_control(dir.path(), &io).unwrap().is_none());
    // An empty database directory, or a temporary file left by a first
    // checkpoint that died, is no data.
    std::fs::create_dir(dir.path().join("5")).unwrap();
    std::fs::write(dir.path().join("5").join("1-1.map.tmp"), b"x").unwrap();
    std::fs::write(dir.path().join("control.tmp"), b"x").unwrap();
    assert!(Engine::check_control(dir.path(), &io).unwrap().is_none());
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
