//! What an RDB snapshot holds, read as it streams: each key without an expiry, counted and
//! digested with its type (and a string's value) in a [`ContentDigest`], which does not depend
//! on the order keys come in. A backup records it of the snapshot it stores; a restore drill
//! reads it of a snapshot of the member restored from that backup, and the two must agree.
//!
//! Only what two servers holding the same data write alike is digested: a key's database, name
//! and type (string, list, set, sorted set, hash, stream, module), and a string's value. The
//! elements of other types are skipped, not digested: a server that loads a set stored as a
//! hash table may keep it as a list pack, and writes it back in another encoding and order. A key
//! with an expiry is counted apart and not compared: it may expire between the backup and the
//! drill, and a server drops a key loaded already expired.
//!
//! The format is Redis's `rdb.c` (versions up to 11, Redis 7.2). A snapshot holding a value this
//! reader cannot step over (a module value of the pre-4.0 format, a type it does not know) is
//! refused with what it found: its backup records no content and cannot be drilled.

use quorum_core::backup::digest::{ContentDigest, ContentFingerprint};
use tokio::io::{AsyncRead, AsyncReadExt, BufReader};

/// What a snapshot holds.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RdbContent {
    /// The keys without an expiry.
    pub persistent: ContentDigest,
    /// The keys with an expiry, counted only.
    pub volatile: u64,
}

impl RdbContent {
    /// As a backup's status records it: the keys without an expiry.
    pub fn fingerprint(&self) -> ContentFingerprint {
        self.persistent.fingerprint()
    }
}

/// Why a snapshot's content could not be read.
#[derive(Debug, thiserror::Error)]
pub enum RdbError {
    #[error("the snapshot ended early: {0}")]
    Io(#[from] std::io::Error),
    #[error("not an RDB snapshot: {0}")]
    Malformed(String),
    #[error("the snapshot holds {0}, which this operator cannot read past")]
    Unsupported(String),
}

/// The opcodes between keys (`rdb.h`).
mod opcode {
    pub const SLOT_INFO: u8 = 244;
    pub const FUNCTION2: u8 = 245;
    pub const FUNCTION_PRE_GA: u8 = 246;
    pub const MODULE_AUX: u8 = 247;
    pub const IDLE: u8 = 248;
    pub const FREQ: u8 = 249;
    pub const AUX: u8 = 250;
    pub const RESIZEDB: u8 = 251;
    pub const EXPIRETIME_MS: u8 = 252;
    pub const EXPIRETIME: u8 = 253;
    pub const SELECTDB: u8 = 254;
    pub const EOF: u8 = 255;
}

/// The type a value of each RDB type has in Redis, as `TYPE` names it.
fn logical_type(rdb_type: u8) -> Option<&'static str> {
    Some(match rdb_type {
        0 => "string",
        1 | 10 | 14 | 18 => "list",
        2 | 11 | 20 => "set",
        3 | 5 | 12 | 17 => "zset",
        4 | 9 | 13 | 16 => "hash",
        6 | 7 => "module",
        15 | 19 | 21 => "stream",
        _ => return None,
    })
}

/// Reads a whole RDB snapshot from `source` (to its end mark; the checksum after it is not
/// read) and returns what it holds.
///
/// # Errors
/// [`RdbError`] when `source` ends early, is not an RDB snapshot, or holds a value this reader
/// cannot step over.
pub async fn content<R: AsyncRead + Unpin>(source: R) -> Result<RdbContent, RdbError> {
    let mut rdb = Reader(BufReader::with_capacity(64 * 1024, source));
    let mut magic = [0u8; 9];
    rdb.0.read_exact(&mut magic).await?;
    if &magic[..5] != b"REDIS" || !magic[5..].iter().all(u8::is_ascii_digit) {
        return Err(RdbError::Malformed(format!(
            "it starts with {:?}",
            String::from_utf8_lossy(&magic)
        )));
    }
    let mut content = RdbContent::default();
    let mut database = 0u64;
    let mut expires = false;
    loop {
        let kind = rdb.byte().await?;
        match kind {
            opcode::EOF => return Ok(content),
            opcode::SELECTDB => database = rdb.length().await?,
            opcode::RESIZEDB => {
                rdb.length().await?;
                rdb.length().await?;
            }
            opcode::EXPIRETIME_MS => {
                rdb.skip(8).await?;
                expires = true;
            }
            opcode::EXPIRETIME => {
                rdb.skip(4).await?;
                expires = true;
            }
            opcode::FREQ => rdb.skip(1).await?,
            opcode::IDLE => {
                rdb.length().await?;
            }
            opcode::AUX => {
                rdb.skip_string().await?;
                rdb.skip_string().await?;
            }
            opcode::SLOT_INFO => {
                for _ in 0..3 {
                    rdb.length().await?;
                }
            }
            opcode::FUNCTION2 => rdb.skip_string().await?,
            opcode::MODULE_AUX => {
                rdb.length().await?; // the module's id
                rdb.length().await?; // when (an unsigned opcode)
                rdb.length().await?; // when
                rdb.skip_module_value().await?;
            }
            opcode::FUNCTION_PRE_GA => {
                return Err(RdbError::Unsupported(
                    "a function of a Redis 7.0 release candidate".into(),
                ));
            }
            rdb_type => {
                let Some(type_name) = logical_type(rdb_type) else {
                    return Err(RdbError::Unsupported(format!("a value of RDB type {rdb_type}")));
                };
                let key = rdb.string().await?;
                let value = rdb.value(rdb_type).await?;
                if std::mem::take(&mut expires) {
                    content.volatile += 1;
                } else {
                    let database = database.to_be_bytes();
                    let key_length = (key.len() as u64).to_be_bytes();
                    content.persistent.add_parts(&[
                        &database,
                        &key_length,
                        &key,
                        type_name.as_bytes(),
                        b"\0",
                        value.as_deref().unwrap_or_default(),
                    ]);
                }
            }
        }
    }
}

/// A length as `rdb.c` encodes it, or the special encoding of a string in its place.
enum Length {
    Plain(u64),
    /// An integer (8, 16 or 32 bits) or an LZF-compressed string.
    Encoded(u8),
}

struct Reader<R>(BufReader<R>);

impl<R: AsyncRead + Unpin> Reader<R> {
    async fn byte(&mut self) -> Result<u8, RdbError> {
        Ok(self.0.read_u8().await?)
    }

    async fn skip(&mut self, bytes: u64) -> Result<(), RdbError> {
        let skipped = tokio::io::copy(&mut (&mut self.0).take(bytes), &mut tokio::io::sink()).await?;
        if skipped < bytes {
            return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof).into());
        }
        Ok(())
    }

    async fn bytes(&mut self, count: u64) -> Result<Vec<u8>, RdbError> {
        let count =
            usize::try_from(count).map_err(|_| RdbError::Malformed(format!("a string of {count} bytes")))?;
        let mut bytes = vec![0u8; count];
        self.0.read_exact(&mut bytes).await?;
        Ok(bytes)
    }

    async fn length_or_encoding(&mut self) -> Result<Length, RdbError> {
        let first = self.byte().await?;
        Ok(match first >> 6 {
            0 => Length::Plain(u64::from(first & 0x3f)),
            1 => Length::Plain((u64::from(first & 0x3f) << 8) | u64::from(self.byte().await?)),
            2 => match first {
                0x80 => Length::Plain(u64::from(self.0.read_u32().await?)),
                0x81 => Length::Plain(self.0.read_u64().await?),
                other => return Err(RdbError::Malformed(format!("length byte {other:#04x}"))),
            },
            _ => Length::Encoded(first & 0x3f),
        })
    }

    async fn length(&mut self) -> Result<u64, RdbError> {
        match self.length_or_encoding().await? {
            Length::Plain(length) => Ok(length),
            Length::Encoded(encoding) => Err(RdbError::Malformed(format!(
                "an encoded string ({encoding}) where a length belongs"
            ))),
        }
    }

    /// A string, as the bytes it stands for (an integer as its decimal digits, a compressed
    /// string uncompressed).
    async fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        match self.length_or_encoding().await? {
            Length::Plain(length) => self.bytes(length).await,
            Length::Encoded(0) => Ok((self.0.read_i8().await?).to_string().into_bytes()),
            Length::Encoded(1) => Ok((self.0.read_i16_le().await?).to_string().into_bytes()),
            Length::Encoded(2) => Ok((self.0.read_i32_le().await?).to_string().into_bytes()),
            Length::Encoded(3) => {
                let compressed = self.length().await?;
                let length = self.length().await?;
                let compressed = self.bytes(compressed).await?;
                lzf_decompress(&compressed, length)
            }
            Length::Encoded(other) => Err(RdbError::Malformed(format!("string encoding {other}"))),
        }
    }

    async fn skip_string(&mut self) -> Result<(), RdbError> {
        match self.length_or_encoding().await? {
            Length::Plain(length) => self.skip(length).await,
            Length::Encoded(0) => self.skip(1).await,
            Length::Encoded(1) => self.skip(2).await,
            Length::Encoded(2) => self.skip(4).await,
            Length::Encoded(3) => {
                let compressed = self.length().await?;
                self.length().await?;
                self.skip(compressed).await
            }
            Length::Encoded(other) => Err(RdbError::Malformed(format!("string encoding {other}"))),
        }
    }

    async fn skip_strings(&mut self, count: u64) -> Result<(), RdbError> {
        for _ in 0..count {
            self.skip_string().await?;
        }
        Ok(())
    }

    /// A value of `rdb_type`: a string's bytes; other types are stepped over (`None`).
    async fn value(&mut self, rdb_type: u8) -> Result<Option<Vec<u8>>, RdbError> {
        match rdb_type {
            0 => return Ok(Some(self.string().await?)),
            // Lists, sets and quicklists of list packs: a count, then as many strings.
            1 | 2 | 14 => {
                let count = self.length().await?;
                self.skip_strings(count).await?;
            }
            // Sorted sets with scores as text: a string and a length-prefixed score each.
            3 => {
                for _ in 0..self.length().await? {
                    self.skip_string().await?;
                    let score = self.byte().await?;
                    // 253, 254 and 255 stand for NaN and the infinities, with no bytes after.
                    if score < 253 {
                        self.skip(u64::from(score)).await?;
                    }
                }
            }
            4 => {
                let count = self.length().await?;
                self.skip_strings(2 * count).await?;
            }
            // Sorted sets with binary scores.
            5 => {
                for _ in 0..self.length().await? {
                    self.skip_string().await?;
                    self.skip(8).await?;
                }
            }
            6 => {
                return Err(RdbError::Unsupported(
                    "a module value of the format before Redis 4.0".into(),
                ));
            }
            7 => {
                self.length().await?; // the module's id
                self.skip_module_value().await?;
            }
            // Zipmaps, ziplists, intsets and list packs: one string each.
            9..=13 | 16 | 17 | 20 => self.skip_string().await?,
            // Quicklists of containers: a count, then a container kind and a string each.
            18 => {
                for _ in 0..self.length().await? {
                    self.length().await?;
                    self.skip_string().await?;
                }
            }
            15 | 19 | 21 => self.skip_stream(rdb_type).await?,
            other => return Err(RdbError::Unsupported(format!("a value of RDB type {other}"))),
        }
        Ok(None)
    }

    /// A module's value written through its typed opcodes, up to their end mark.
    async fn skip_module_value(&mut self) -> Result<(), RdbError> {
        loop {
            match self.length().await? {
                0 => return Ok(()),
                1 | 2 => {
                    self.length().await?;
                }
                3 => self.skip(4).await?,
                4 => self.skip(8).await?,
                5 => self.skip_string().await?,
                other => return Err(RdbError::Malformed(format!("module opcode {other}"))),
            }
        }
    }

    /// A stream (`rdbLoadObject`'s `RDB_TYPE_STREAM_LISTPACKS*`).
    async fn skip_stream(&mut self, rdb_type: u8) -> Result<(), RdbError> {
        let second_format = rdb_type >= 19;
        let third_format = rdb_type >= 21;
        // Nodes: a key (the node's first id) and a list pack each.
        let nodes = self.length().await?;
        self.skip_strings(2 * nodes).await?;
        // Length, last id; then first id, largest deleted id and entries added.
        let fields = if second_format { 8 } else { 3 };
        for _ in 0..fields {
            self.length().await?;
        }
        for _ in 0..self.length().await? {
            // A consumer group: name, last delivered id, entries read.
            self.skip_string().await?;
            for _ in 0..if second_format { 3 } else { 2 } {
                self.length().await?;
            }
            // Its pending entries: an id, a delivery time and a delivery count each.
            for _ in 0..self.length().await? {
                self.skip(16 + 8).await?;
                self.length().await?;
            }
            // Its consumers: a name, when seen (and active), and their pending ids.
            for _ in 0..self.length().await? {
                self.skip_string().await?;
                self.skip(if third_format { 16 } else { 8 }).await?;
                let pending = self.length().await?;
                self.skip(16 * pending).await?;
            }
        }
        Ok(())
    }
}

/// LZF as Redis writes it (`lzf_d.c`): literal runs and back references, into exactly
/// `length` bytes.
fn lzf_decompress(input: &[u8], length: u64) -> Result<Vec<u8>, RdbError> {
    let malformed = || RdbError::Malformed("a compressed string that does not uncompress".into());
    let length = usize::try_from(length).map_err(|_| malformed())?;
    let mut output = Vec::with_capacity(length);
    let mut at = 0;
    while at < input.len() {
        let control = usize::from(input[at]);
        at += 1;
        if control < 32 {
            let run = control + 1;
            let literal = input.get(at..at + run).ok_or_else(malformed)?;
            output.extend_from_slice(literal);
            at += run;
        } else {
            let mut run = control >> 5;
            if run == 7 {
                run += usize::from(*input.get(at).ok_or_else(malformed)?);
                at += 1;
            }
            let low = usize::from(*input.get(at).ok_or_else(malformed)?);
            at += 1;
            let back = ((control & 0x1f) << 8) + low + 1;
            let start = output.len().checked_sub(back).ok_or_else(malformed)?;
            // A reference may overlap what it copies: byte by byte.
            for offset in 0..run + 2 {
                let byte = output[start + offset];
                output.push(byte);
            }
        }
        if output.len() > length {
            return Err(malformed());
        }
    }
    if output.len() != length {
        return Err(malformed());
    }
    Ok(output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lzf_literals_and_overlapping_back_references_uncompress() {
        // "abc" as a literal run, then a reference 3 back copying 6 bytes: "abcabcabc".
        let compressed = [2, b'a', b'b', b'c', (4 << 5), 2];
        assert_eq!(lzf_decompress(&compressed, 9).unwrap(), b"abcabcabc");
        assert!(lzf_decompress(&compressed, 8).is_err(), "longer than said");
        assert!(
            lzf_decompress(&[(1 << 5), 0], 3).is_err(),
            "a reference before any byte"
        );
    }

    #[tokio::test]
    async fn a_foreign_or_truncated_stream_is_refused() {
        assert!(matches!(
            content(&b"NOTREDIS0010"[..]).await,
            Err(RdbError::Malformed(_))
        ));
        // The header and a string key cut short.
        let truncated = b"REDIS0010\xfe\x00\x00\x03ab";
        assert!(matches!(content(&truncated[..]).await, Err(RdbError::Io(_))));
    }

    #[tokio::test]
    async fn keys_without_expiry_are_digested_and_volatile_ones_counted() {
        // db 0; "a" = "1" (8-bit integer encoding); "b" = "xy" with a millisecond expiry.
        let mut rdb = b"REDIS0010\xfa\x09redis-ver\x067.0.15\xfe\x00\xfb\x02\x01".to_vec();
        rdb.extend_from_slice(b"\x00\x01a\xc0\x01");
        rdb.extend_from_slice(b"\xfc\x00\x00\x00\x00\x00\x00\x00\x01\x00\x01b\x02xy");
        rdb.push(0xff);
        let found = content(&rdb[..]).await.unwrap();
        assert_eq!(found.volatile, 1);
        let mut expected = ContentDigest::default();
        expected.add_parts(&[
            &0u64.to_be_bytes(),
            &1u64.to_be_bytes(),
            b"a",
            b"string",
            b"\0",
            b"1",
        ]);
        assert_eq!(found.persistent, expected);
    }
}
