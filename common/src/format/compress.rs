//! Per-block compression. Each block is compressed on its own so restore can fetch and
//! decode one block with a ranged read. Decompression is bounded: a hostile block cannot
//! make a reader allocate more than a fixed limit.

use std::fmt;
use std::io::Read;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use super::FormatError;

/// How block bytes are stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    /// The XML as is.
    #[default]
    None,
    /// Zstandard (level 3), one frame per block.
    Zstd,
    /// gzip (RFC 1952), one member per block.
    Gzip,
}

impl Compression {
    /// The name used on the command line, in metadata and in manifests.
    pub fn as_str(self) -> &'static str {
        match self {
            Compression::None => "none",
            Compression::Zstd => "zstd",
            Compression::Gzip => "gzip",
        }
    }

    /// Compresses one block.
    pub fn compress(self, data: &[u8]) -> Vec<u8> {
        match self {
            Compression::None => data.to_vec(),
            Compression::Zstd => {
                zstd::bulk::compress(data, 3).expect("zstd compression of a buffer cannot fail")
            }
            Compression::Gzip => {
                let mut enc = flate2::write::GzEncoder::new(
                    Vec::with_capacity(data.len() / 3),
                    flate2::Compression::new(6),
                );
                std::io::Write::write_all(&mut enc, data).expect("writing to a Vec cannot fail");
                enc.finish().expect("writing to a Vec cannot fail")
            }
        }
    }

    /// Decompresses one block, refusing to produce more than `limit` bytes.
    pub fn decompress(self, data: &[u8], limit: usize) -> Result<Vec<u8>, FormatError> {
        let bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, FormatError> {
            let mut out = Vec::new();
            reader
                .take(limit as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    FormatError::Corrupt(format!("{} data does not decompress: {e}", self.as_str()))
                })?;
            if out.len() > limit {
                return Err(FormatError::Corrupt(format!(
                    "block decompresses to more than {limit} bytes"
                )));
            }
            Ok(out)
        };
        match self {
            Compression::None => {
                if data.len() > limit {
                    return Err(FormatError::Corrupt(format!(
                        "block is larger than {limit} bytes"
                    )));
                }
                Ok(data.to_vec())
            }
            Compression::Zstd => {
                let mut d = zstd::stream::read::Decoder::new(data)
                    .map_err(|e| FormatError::Corrupt(format!("zstd: {e}")))?
                    .single_frame();
                bounded(&mut d)
            }
            Compression::Gzip => {
                let mut d = flate2::read::GzDecoder::new(data);
                bounded(&mut d)
            }
        }
    }
}

impl fmt::Display for Compression {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "none" => Ok(Compression::None),
            "zstd" => Ok(Compression::Zstd),
            "gzip" => Ok(Compression::Gzip),
            other => Err(format!(
                "unknown compression {other:?} (none, zstd or gzip)"
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_bounds() {
        let data = "<Block>".repeat(10_000).into_bytes();
        for c in [Compression::None, Compression::Zstd, Compression::Gzip] {
            let packed = c.compress(&data);
            assert_eq!(c.decompress(&packed, data.len()).unwrap(), data, "{c}");
            assert!(c.decompress(&packed, data.len() - 1).is_err(), "{c} bound");
        }
        assert!(Compression::Zstd.decompress(b"garbage", 100).is_err());
        assert!(Compression::Gzip.decompress(b"garbage", 100).is_err());
        assert_eq!("ZSTD".parse::<Compression>(), Ok(Compression::Zstd));
        assert!("lz4".parse::<Compression>().is_err());
    }
}
