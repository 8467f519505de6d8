//! What a logical backup holds, as a figure two copies of the same data agree on: the records
//! (rows, documents) counted, and a digest of them that does not depend on the order they come
//! in. A dump records it as it writes each record; a dump of a member restored from that backup
//! must find the same, whatever order the restored server returns the records in.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Records counted and digested as a multiset: the digest is the sum, modulo 2^128, of the
/// first 128 bits of each record's SHA-256. Adding the same records in any order gives the
/// same digest; a record lost, added, or changed changes it (but for a collision of SHA-256
/// prefixes, which nobody can arrange by accident).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ContentDigest {
    records: u64,
    sum: u128,
}

impl ContentDigest {
    /// Counts `record` (its canonical bytes: the same on every copy of the data).
    pub fn add(&mut self, record: &[u8]) {
        self.add_parts(&[record]);
    }

    /// Counts the record made of `parts` one after the other (a table's or collection's name,
    /// a separator, then the record), without joining them first.
    pub fn add_parts(&mut self, parts: &[&[u8]]) {
        let mut hasher = Sha256::new();
        for part in parts {
            hasher.update(part);
        }
        let hash = hasher.finalize();
        let mut prefix = [0u8; 16];
        prefix.copy_from_slice(&hash[..16]);
        self.records += 1;
        self.sum = self.sum.wrapping_add(u128::from_be_bytes(prefix));
    }

    /// Both digests' records together.
    pub fn merge(&mut self, other: &ContentDigest) {
        self.records += other.records;
        self.sum = self.sum.wrapping_add(other.sum);
    }

    pub fn records(&self) -> u64 {
        self.records
    }

    /// As recorded in a backup's status.
    pub fn fingerprint(&self) -> ContentFingerprint {
        ContentFingerprint {
            records: self.records,
            digest: format!("{:032x}", self.sum),
        }
    }
}

/// A [`ContentDigest`] as a backup's status records it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContentFingerprint {
    /// Rows (MySQL) or documents (MongoDB) in the backup.
    pub records: u64,
    /// The records' digest, independent of their order (32 hexadecimal digits).
    pub digest: String,
}

impl ContentFingerprint {
    /// What differs between the fingerprint recorded at backup time (`self`) and `found` on a
    /// copy of the data; `None` when they agree.
    pub fn mismatch(&self, found: &ContentFingerprint) -> Option<String> {
        if self.records != found.records {
            return Some(format!(
                "{} records where the backup recorded {}",
                found.records, self.records
            ));
        }
        (self.digest != found.digest).then(|| {
            format!(
                "the {} records' digest is {} where the backup recorded {}: a record's content differs",
                found.records, found.digest, self.digest
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(records: &[&str]) -> ContentDigest {
        let mut digest = ContentDigest::default();
        for record in records {
            digest.add(record.as_bytes());
        }
        digest
    }

    #[test]
    fn the_same_records_in_any_order_agree_and_any_change_shows() {
        let recorded = digest_of(&["a", "b", "c"]).fingerprint();
        assert_eq!(recorded.records, 3);
        assert_eq!(recorded.digest.len(), 32);
        assert_eq!(
            recorded.mismatch(&digest_of(&["c", "a", "b"]).fingerprint()),
            None
        );

        let cases = [
            (vec!["a", "b"], "2 records where the backup recorded 3"),
            (vec!["a", "b", "c", "d"], "4 records where the backup recorded 3"),
            (vec!["a", "b", "x"], "a record's content differs"),
            // A record twice and another missing: the count alone would not tell.
            (vec!["a", "a", "c"], "a record's content differs"),
        ];
        for (found, expected) in cases {
            let mismatch = recorded.mismatch(&digest_of(&found).fingerprint());
            assert!(
                mismatch.as_deref().is_some_and(|m| m.contains(expected)),
                "{found:?}: {mismatch:?}"
            );
        }
    }

    #[test]
    fn digests_of_parts_merge_into_the_digest_of_the_whole() {
        let mut parts = digest_of(&["a", "b"]);
        parts.merge(&digest_of(&["c"]));
        assert_eq!(parts, digest_of(&["a", "b", "c"]));
        assert_eq!(ContentDigest::default().fingerprint().records, 0);
        let mut split = ContentDigest::default();
        split.add_parts(&[b"app.t", b"\n", b"1,'x'"]);
        assert_eq!(split, digest_of(&["app.t\n1,'x'"]));
    }
}
