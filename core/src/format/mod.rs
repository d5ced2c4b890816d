//! The backup format (version 2), specified in `docs/FORMAT.md`: blocks of XML batches,
//! each block self-contained and optionally compressed on its own, packed from a stream
//! of entities with memory bounded by one block.

pub(crate) mod block;
mod compress;
mod escape;
mod packer;
#[cfg(test)]
mod properties;

pub use block::{DecodedBlock, decode_block};
pub use compress::Compression;
pub use escape::is_xml_char;
pub use packer::{
    DEFAULT_BATCH_BYTES, DEFAULT_BLOCK_BYTES, MARK_ENTITIES, Packer, PackerConfig, SealedBlock, hex,
};

/// The backup format version this build writes: the `format` of plans, commit records
/// and manifests. Version 2 lets a commit record hold a small range's one block itself
/// (an inline blob) instead of naming a data blob.
pub const FORMAT_VERSION: u32 = 2;

/// The backup format version a backup is written in unless asked for another
/// (`tablevault backup --format`): 1, every range in data blobs, as DESIGN's format has
/// it and every tablevault reads. Format 2 (inline blobs) is asked for.
pub const DEFAULT_FORMAT: u32 = 1;

/// The backup format versions this build reads. A backup of version 1 has no inline
/// blobs; it reads the same.
pub const READABLE_FORMATS: std::ops::RangeInclusive<u32> = 1..=FORMAT_VERSION;

/// The first backup format whose commit records may hold inline blobs: workers inline
/// only in jobs of at least this version, so a backup a reader of version 1 would take
/// for its own never has one.
pub const INLINE_SINCE_FORMAT: u32 = 2;

/// Largest stored block a writer keeps inline: a range that is one block of at most
/// this many bytes (a small table, compressed) costs one write, its commit record. It
/// bounds what a commit record carries, which the finalizer and a restore's planning
/// read for every range.
pub const INLINE_MAX_BYTES: u64 = 64 << 10;

/// The version of the block XML (its root's `version`) and of data blobs (their
/// `tvformat` metadata), unchanged since format 1.
pub const BLOCK_VERSION: u32 = 1;

/// Largest decompressed block a reader accepts. Writers seal blocks near 4 MiB; one batch
/// of large entities can overflow that, never by this much.
pub const MAX_BLOCK_BYTES: usize = 64 << 20;

/// A block that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FormatError {
    /// The bytes are not a valid block; the message says what is wrong.
    #[error("corrupt block: {0}")]
    Corrupt(String),
    /// The block was written by a newer (or unknown) format version.
    #[error("block has version {0}; this tablevault reads version 1")]
    UnsupportedVersion(String),
}
