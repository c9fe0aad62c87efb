//! Shared metadata: a small tree costs two chunks (its page table and its
//! bitmap referenced directly from the slot); bigger trees grow directories.

use super::*;
use crate::buffer::Pool;
use crate::error::EngineError;
use crate::io::StdIo;
use crate::meta::Meta;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// An engine over private metadata of `max_trees` slots and `nchunks` chunks.
fn open_meta(dir: &Path, max_trees: usize, nchunks: usize) -> Engine {
    Engine::open_with(
        dir,
        Pool::private(64),
        Meta::private(max_trees, nchunks),
        Arc::new(StdIo::new()),
        None,
    )
    .unwrap()
}

/// The server's default arena (4096 chunks, 4096 slots): how many empty
/// trees fit before creation fails with `MetadataFull`.
#[test]
fn default_arena_capacity() {
    let dir = tempfile::tempdir().unwrap();
    let e = open_meta(dir.path(), 4096, 4096);
    let mut n = 0u32;
    let err = loop {
        match e.open_tree(n + 1, TreeOptions::default()) {
            Ok(_) => n += 1,
            Err(err) => break err,
        }
    };
    eprintln!("default arena capacity: {n} trees ({err})");
    assert!(matches!(err, EngineError::MetadataFull(4096)), "{err:?}");
    assert_eq!(n, 2048, "two chunks per small tree");
}

fn chunks(e: &Engine) -> usize {
    e.inner.meta.chunks_in_use()
}

#[test]
fn new_small_tree_takes_two_chunks_and_dropping_returns_them() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 32);
    assert_eq!(chunks(&e), 0);
    let t = tree(&e, 1, 1);
    assert_eq!((chunks(&e), t.file().chunk_count()), (2, 2));
    // A table with a toast tree: two trees, four chunks.
    let u = tree(&e, 2, 1);
    for i in 0..200 {
        t.insert(&key(i), &value(i, 0, 30)).unwrap();
        u.insert(&key(i), &value(i, 0, 30)).unwrap();
    }
    e.checkpoint(0).unwrap();
    assert_eq!(chunks(&e), 4);
    drop((t, u));
    e.drop_tree(1).unwrap();
    e.drop_tree(2).unwrap();
    assert_eq!(chunks(&e), 0, "a dropped tree's chunks come back at once");
    // Its slot and files stay until a checkpoint; the trees are gone.
    assert!(matches!(e.tree(1), Err(EngineError::NoSuchTree(_))));
    e.checkpoint(0).unwrap();
    assert_eq!(chunks(&e), 0);
    // A new tree takes the chunks again.
    let v = tree(&e, 3, 1);
    v.insert(&key(1), &value(1, 0, 30)).unwrap();
    assert_eq!(chunks(&e), 2);
}

/// A tree of more than 409 pages and more than 65,536 units (one bitmap
/// chunk) grows directories while another process reads it; every row
/// stays readable, also after a checkpoint and a reload from disk, and
/// dropping it returns every chunk.
#[test]
fn big_tree_grows_directories_survives_reload_and_drop() {
    const LEN: usize = 1000;
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let small = tree(&e, 7, 1);
    small.insert(&key(1), &value(1, 0, 10)).unwrap();
    let other = e.attach_another(Arc::new(StdIo::new())).unwrap();
    let t = tree(&e, 1, -1);
    let written = AtomicU64::new(0);
    let done = AtomicBool::new(false);
    let n = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let t2 = tree(&other, 1, -1);
            let mut rng = Rng(5);
            let mut reads = 0u64;
            while !done.load(Ordering::Acquire) {
                let w = written.load(Ordering::Acquire);
                if w > 0 {
                    let i = rng.below(w);
                    assert_eq!(t2.get(&key(i)).unwrap(), Some(value(i, 0, LEN)), "key {i}");
                    reads += 1;
                }
            }
            reads
        });
        // Uncompressed pages take 16 units each: about 4000 pages.
        let mut i = 0u64;
        while t.file().end_units() <= 65_536 + 1000 {
            t.insert(&key(i), &value(i, 0, LEN)).unwrap();
            i += 1;
            written.store(i, Ordering::Release);
        }
        done.store(true, Ordering::Release);
        assert!(reader.join().unwrap() > 0);
        i
    });
    let expect = |t: &Tree| {
        let f = t.file();
        let (np, end) = (f.npages() as usize, f.end_units() as usize);
        assert!(np > 2 * 409 && end > 65_536, "{np} pages, {end} units");
        (np.div_ceil(409) + 1) + (end.div_ceil(65_536) + 1)
    };
    let want = expect(&t);
    assert_eq!(t.file().chunk_count(), want);
    assert_eq!(chunks(&e), want + 2);
    let check = |t: &Tree| {
        for i in 0..n {
            assert_eq!(t.get(&key(i)).unwrap(), Some(value(i, 0, LEN)), "key {i}");
        }
        assert_eq!(contents(t).len() as u64, n);
        assert_valid(t);
    };
    check(&t);
    e.checkpoint(0).unwrap();
    drop((t, small, other));
    drop(e);

    let e = open(dir.path(), 64);
    let t = tree(&e, 1, -1);
    let want = expect(&t);
    assert_eq!(t.file().chunk_count(), want);
    check(&t);
    assert_eq!(tree(&e, 7, 1).get(&key(1)).unwrap(), Some(value(1, 0, 10)));
    assert_eq!(chunks(&e), want + 2);
    drop(t);
    e.drop_tree(1).unwrap();
    assert_eq!(chunks(&e), 2, "only the small tree's chunks remain");
    e.checkpoint(0).unwrap();
    e.drop_tree(7).unwrap();
    assert_eq!(chunks(&e), 0);
    e.checkpoint(0).unwrap();
}

/// Dropping a tree gives its chunks back at once, while its file still
/// holds the durable checkpoint's images: a write of one of its pages that
/// an eviction began before the drop (it found the tree live) and finishes
/// after it must not take a unit of the reset bitmap, which would write
/// over a durable image. A crash before the next checkpoint brings the tree
/// back from that checkpoint (no WAL here), intact.
#[test]
fn a_write_finishing_after_the_drop_leaves_the_durable_images_intact() {
    let dir = tempfile::tempdir().unwrap();
    let e = open(dir.path(), 64);
    let t = tree(&e, 1, -1);
    for i in 0..200 {
        t.insert(&key(i), &value(i, 0, 200)).unwrap();
    }
    e.checkpoint(0).unwrap();
    let durable = contents(&t);
    let (slot, _) = e.inner.lookup(crate::TreeId::from(1u32)).unwrap().unwrap();
    let num = e.inner.meta.slot(slot).num.load(Ordering::Acquire);
    let page = vec![0u8; crate::page::PAGE_SIZE];
    drop(t);
    e.drop_tree(1).unwrap();
    assert_eq!(chunks(&e), 0);
    // The eviction's write, past its check that the tree was live.
    e.inner.write_image_checked(slot, num, 0, &page, 1).unwrap();
    drop(e);
    let e = open(dir.path(), 64);
    assert!(e.take_load_damage().is_empty(), "a durable image was overwritten");
    let back = tree(&e, 1, -1);
    assert_eq!(contents(&back), durable);
    assert_valid(&back);
}
