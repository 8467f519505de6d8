//! Pushing an image from an OCI layout to a registry, over the OCI distribution API: every blob
//! the registry lacks, then the manifest under its tag. For registries that ask for no
//! credentials (a registry of your own on this machine or your network); plain HTTP on
//! loopback only, HTTPS everywhere else.

use std::path::Path;

use anyhow::{Context, bail, ensure};
use serde_json::Value;

/// Where an image goes: `registry/repository:tag`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    pub registry: String,
    pub repository: String,
    pub tag: String,
}

impl std::str::FromStr for Destination {
    type Err = anyhow::Error;

    fn from_str(text: &str) -> anyhow::Result<Self> {
        let (registry, rest) = text
            .split_once('/')
            .with_context(|| format!("{text:?} names no registry: REGISTRY/REPOSITORY:TAG"))?;
        let (repository, tag) = rest
            .rsplit_once(':')
            .with_context(|| format!("{text:?} has no tag: REGISTRY/REPOSITORY:TAG"))?;
        ensure!(
            !registry.is_empty() && !repository.is_empty() && !tag.is_empty() && !tag.contains('/'),
            "{text:?} is not REGISTRY/REPOSITORY:TAG"
        );
        Ok(Self {
            registry: registry.to_string(),
            repository: repository.to_string(),
            tag: tag.to_string(),
        })
    }
}

impl std::fmt::Display for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}:{}", self.registry, self.repository, self.tag)
    }
}

impl Destination {
    /// `reference` (`ghcr.io/quorum-dev/catalog:v0.1.0`) with its registry replaced by
    /// `registry`: where a mirror of its registry keeps it.
    pub fn mirrored(reference: &str, registry: &str) -> anyhow::Result<Self> {
        let mut destination: Self = reference.parse()?;
        destination.registry = registry.to_string();
        Ok(destination)
    }

    fn base_url(&self) -> String {
        let host = self
            .registry
            .rsplit_once(':')
            .map_or(self.registry.as_str(), |(host, _)| host);
        let scheme = if matches!(host, "127.0.0.1" | "localhost" | "[::1]") {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{}/v2/{}", self.registry, self.repository)
    }
}

/// The manifest of `tag` in the OCI layout `layout`: its media type, digest and bytes.
fn manifest(layout: &Path, tag: &str) -> anyhow::Result<(String, String, Vec<u8>)> {
    let index: Value = serde_json::from_slice(
        &std::fs::read(layout.join("index.json"))
            .with_context(|| format!("{} is no OCI layout", layout.display()))?,
    )?;
    let descriptor = index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|d| d["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .with_context(|| format!("{} has no image tagged {tag}", layout.display()))?;
    let media_type = descriptor["mediaType"].as_str().unwrap_or_default().to_string();
    ensure!(
        media_type == "application/vnd.oci.image.manifest.v1+json",
        "{}:{tag} is a {media_type}, not one image's manifest",
        layout.display()
    );
    let digest = descriptor["digest"]
        .as_str()
        .context("a descriptor without a digest")?
        .to_string();
    Ok((media_type, digest.clone(), blob(layout, &digest)?))
}

/// A blob of the layout, checked against its digest.
fn blob(layout: &Path, digest: &str) -> anyhow::Result<Vec<u8>> {
    use sha2::Digest;
    let hex = digest
        .strip_prefix("sha256:")
        .with_context(|| format!("{digest} is not a sha256 digest"))?;
    let path = layout.join("blobs/sha256").join(hex);
    let bytes = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    let actual = format!("{:x}", sha2::Sha256::digest(&bytes));
    ensure!(actual == hex, "{} does not match its digest", path.display());
    Ok(bytes)
}

/// Pushes the image tagged `tag` in the OCI layout `layout` to `destination`; returns the
/// manifest's digest.
pub fn push(layout: &Path, tag: &str, destination: &Destination) -> anyhow::Result<String> {
    let (media_type, digest, manifest_bytes) = manifest(layout, tag)?;
    let manifest: Value = serde_json::from_slice(&manifest_bytes)?;
    let mut digests: Vec<String> = vec![
        manifest["config"]["digest"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    ];
    digests.extend(
        manifest["layers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|layer| layer["digest"].as_str().map(str::to_string)),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let base = destination.base_url();
        for blob_digest in &digests {
            upload_blob(&client, &base, blob_digest, blob(layout, blob_digest)?)
                .await
                .with_context(|| format!("pushing {blob_digest} to {destination}"))?;
        }
        let response = client
            .put(format!("{base}/manifests/{}", destination.tag))
            .header(reqwest::header::CONTENT_TYPE, media_type)
            .body(manifest_bytes)
            .send()
            .await
            .with_context(|| format!("pushing the manifest to {destination}"))?;
        expect(response, reqwest::StatusCode::CREATED, "the manifest").await?;
        anyhow::Ok(())
    })?;
    Ok(digest)
}

async fn upload_blob(
    client: &reqwest::Client,
    base: &str,
    digest: &str,
    bytes: Vec<u8>,
) -> anyhow::Result<()> {
    let present = client.head(format!("{base}/blobs/{digest}")).send().await?;
    if present.status().is_success() {
        return Ok(());
    }
    let started = client.post(format!("{base}/blobs/uploads/")).send().await?;
    let location = started
        .headers()
        .get(reqwest::header::LOCATION)
        .and_then(|value| value.to_str().ok())
        .map(str::to_string);
    expect(started, reqwest::StatusCode::ACCEPTED, "starting an upload").await?;
    let location = location.context("the registry started an upload without a Location")?;
    // The location may be relative to the registry and may carry a query of its own.
    let location = if location.starts_with('/') {
        let origin = base.split("/v2/").next().unwrap_or(base);
        format!("{origin}{location}")
    } else {
        location
    };
    let separator = if location.contains('?') { '&' } else { '?' };
    let finished = client
        .put(format!("{location}{separator}digest={digest}"))
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(bytes)
        .send()
        .await?;
    expect(finished, reqwest::StatusCode::CREATED, "finishing an upload").await
}

async fn expect(response: reqwest::Response, status: reqwest::StatusCode, what: &str) -> anyhow::Result<()> {
    if response.status() == status {
        return Ok(());
    }
    let got = response.status();
    let body = response.text().await.unwrap_or_default();
    bail!("the registry answered {got} to {what} (expected {status}): {body}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_name_a_registry_a_repository_and_a_tag() {
        let destination: Destination = "127.0.0.1:5000/quorum-dev/catalog:v0.1.0".parse().unwrap();
        assert_eq!(destination.registry, "127.0.0.1:5000");
        assert_eq!(destination.repository, "quorum-dev/catalog");
        assert_eq!(destination.tag, "v0.1.0");
        assert_eq!(
            destination.base_url(),
            "http://127.0.0.1:5000/v2/quorum-dev/catalog"
        );
        let remote =
            Destination::mirrored("ghcr.io/quorum-dev/catalog:v0.1.0", "registry.example:5000").unwrap();
        assert_eq!(
            remote.base_url(),
            "https://registry.example:5000/v2/quorum-dev/catalog"
        );
        for refused in ["catalog:v1", "127.0.0.1:5000/catalog", "127.0.0.1:5000/:v1"] {
            assert!(refused.parse::<Destination>().is_err(), "{refused}");
        }
    }
}
