//! Engine benchmark: random insert, random get and full scan of N keys
//! (default 1,000,000; env BENCH_KEYS) with the page pool a tenth of the
//! data, for compression off, zstd 1 and zstd 3. Prints a Markdown table.
//!
//! Run: `cargo bench -p orioledb_engine --bench engine`

use orioledb_engine::io::StdIo;
use orioledb_engine::page::PAGE_SIZE;
use orioledb_engine::{Engine, TreeOptions};
use std::sync::Arc;
use std::time::Instant;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A row-like value: some numbers and repetitive text, ~100 bytes.
fn value(i: u64) -> Vec<u8> {
    format!(
        "{i:>10}|{:>8}|status=active|region=eu-west-{}|note=customer account in good standing",
        i % 977,
        i % 7
    )
    .into_bytes()
}

fn main() {
    let n: u64 = std::env::var("BENCH_KEYS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    // Estimate data pages from item size and a typical 70% fill after random inserts.
    let item = orioledb_engine::page::item_space(8, value(n).len());
    let data_pages = (n as usize * item) as f64 / (PAGE_SIZE as f64 * 0.70);
    let nbuffers = ((data_pages / 10.0) as usize).max(64);
    println!(
        "keys: {n}, pool: {nbuffers} buffers ({} MB), estimated data: {:.0} MB\n",
        (nbuffers * PAGE_SIZE) >> 20,
        data_pages * PAGE_SIZE as f64 / 1048576.0
    );
    println!("| compression | insert ops/s | get ops/s | scan rows/s | tree pages | pool/data | data file MB |");
    println!("|---|---|---|---|---|---|---|");
    let mut keys: Vec<u64> = {
        let mut rng = Rng(42);
        (0..n).map(|_| rng.next()).collect()
    };
    for level in [-1, 1, 3] {
        let dir = tempfile::tempdir_in(
            std::env::var("BENCH_DIR")
                .unwrap_or_else(|_| std::env::temp_dir().to_string_lossy().into()),
        )
        .unwrap();
        let e = Engine::open(dir.path(), nbuffers, Arc::new(StdIo::new())).unwrap();
        let t = e
            .open_tree(
                1,
                TreeOptions {
                    compress: level,
                    ..Default::default()
                },
            )
            .unwrap();
        let start = Instant::now();
        for &k in &keys {
            t.insert(&k.to_be_bytes(), &value(k)).unwrap();
        }
        let ins = n as f64 / start.elapsed().as_secs_f64();
        keys.reverse();
        let start = Instant::now();
        let mut rng = Rng(7);
        for _ in 0..n {
            let k = keys[(rng.next() % n) as usize];
            assert!(t.get(&k.to_be_bytes()).unwrap().is_some());
        }
        let get = n as f64 / start.elapsed().as_secs_f64();
        let start = Instant::now();
        let rows = t.scan().count() as u64;
        assert_eq!(rows, n);
        let scan = rows as f64 / start.elapsed().as_secs_f64();
        e.checkpoint(0).unwrap();
        let s = t.stats();
        let file = std::fs::metadata(dir.path().join("0").join("1"))
            .unwrap()
            .len();
        println!(
            "| {} | {:.0} | {:.0} | {:.0} | {} | 1/{:.1} | {:.1} |",
            if level < 0 {
                "off".to_string()
            } else {
                format!("zstd {level}")
            },
            ins,
            get,
            scan,
            s.pages,
            s.pages as f64 / nbuffers as f64,
            file as f64 / 1048576.0
        );
    }
}
