//! Tree identity.

/// Names a tree: the database it belongs to and its relation file number.
/// Its files are `<dir>/<db>/<rel>` and `<dir>/<db>/<rel>-<checkpoint>.map`.
/// Database 0 holds trees that belong to no database (tests, tools);
/// `From<u32>` makes one of those.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TreeId {
    pub db: u32,
    pub rel: u32,
}

impl TreeId {
    pub const fn new(db: u32, rel: u32) -> TreeId {
        TreeId { db, rel }
    }
}

impl From<u32> for TreeId {
    fn from(rel: u32) -> TreeId {
        TreeId { db: 0, rel }
    }
}

impl std::fmt::Display for TreeId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.db, self.rel)
    }
}
