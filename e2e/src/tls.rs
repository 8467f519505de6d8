//! Certificates for tests of TLS-enabled clusters: a CA, and one certificate it signs for the
//! names a cluster's members, Services and clients use, as a `kubernetes.io/tls` Secret holds it.

use std::collections::BTreeMap;

use k8s_openapi::{ByteString, api::core::v1::Secret};
use kube::api::ObjectMeta;

/// PEM-encoded CA certificate, certificate and private key.
#[derive(Clone)]
pub struct IssuedCertificate {
    pub ca_pem: Vec<u8>,
    pub cert_pem: Vec<u8>,
    pub key_pem: Vec<u8>,
}

/// A CA, and one certificate signed by it for `names` (DNS names or IP addresses) that serves and
/// authenticates clients alike.
pub fn issue_certificate(names: Vec<String>, common_name: &str) -> IssuedCertificate {
    use rcgen::{
        BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
        KeyUsagePurpose,
    };
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("{common_name} CA"));
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names).unwrap();
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyEncipherment,
    ];
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca).unwrap();
    IssuedCertificate {
        ca_pem: ca.pem().into_bytes(),
        cert_pem: cert.pem().into_bytes(),
        key_pem: key.serialize_pem().into_bytes(),
    }
}

/// The `kubernetes.io/tls` Secret `name` holding `issued` (`ca.crt`, `tls.crt`, `tls.key`).
pub fn tls_secret(name: &str, issued: &IssuedCertificate) -> Secret {
    let data: BTreeMap<String, ByteString> = [
        ("ca.crt", &issued.ca_pem),
        ("tls.crt", &issued.cert_pem),
        ("tls.key", &issued.key_pem),
    ]
    .into_iter()
    .map(|(key, value)| (key.to_string(), ByteString(value.clone())))
    .collect();
    Secret {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(data),
        ..Secret::default()
    }
}
