//! Data files, page images, map files and the control file.
pub mod control;
pub mod image;
pub mod map;
pub mod space;
