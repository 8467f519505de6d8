//! The server side of SCRAM-SHA-256 (RFC 5802, RFC 7677) as MongoDB runs it over
//! `saslStart`/`saslContinue`.
//!
//! HMAC and PBKDF2 are written out over `sha2`, which the workspace already pins, rather than
//! adding a second RustCrypto generation next to the one the driver brings; the RFC 7677
//! exchange below checks them end to end.

use base64::{Engine, engine::general_purpose::STANDARD};
use bson::{Document, doc};
use sha2::{Digest, Sha256};

pub const MECHANISM: &str = "SCRAM-SHA-256";
/// MongoDB's default for SCRAM-SHA-256 credentials.
pub const DEFAULT_ITERATIONS: u32 = 15_000;
/// The least `scramSHA256IterationCount` the server accepts.
pub const MIN_ITERATIONS: u32 = 5_000;

pub fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

pub fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    let mut block = [0u8; 64];
    if key.len() > 64 {
        block[..32].copy_from_slice(&sha256(key));
    } else {
        block[..key.len()].copy_from_slice(key);
    }
    let mut inner = Sha256::new();
    inner.update(block.map(|b| b ^ 0x36));
    inner.update(data);
    let mut outer = Sha256::new();
    outer.update(block.map(|b| b ^ 0x5c));
    outer.update(inner.finalize());
    outer.finalize().into()
}

/// PBKDF2-HMAC-SHA-256 with one output block, the length SCRAM-SHA-256 uses.
pub fn pbkdf2_sha256(password: &[u8], salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut first = salt.to_vec();
    first.extend_from_slice(&1u32.to_be_bytes());
    let mut u = hmac_sha256(password, &first);
    let mut result = u;
    for _ in 1..iterations {
        u = hmac_sha256(password, &u);
        for (r, x) in result.iter_mut().zip(u) {
            *r ^= x;
        }
    }
    result
}

/// What a user document keeps under `credentials.SCRAM-SHA-256`: never the password.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Credential {
    pub iterations: u32,
    pub salt: Vec<u8>,
    pub stored_key: [u8; 32],
    pub server_key: [u8; 32],
}

impl Credential {
    /// Derives the credential from a password, SASLprepped as the driver preps it.
    pub fn new(password: &str, salt: Vec<u8>, iterations: u32) -> Result<Self, String> {
        let prepared = stringprep::saslprep(password).map_err(|e| format!("password: {e}"))?;
        let salted = pbkdf2_sha256(prepared.as_bytes(), &salt, iterations);
        let client_key = hmac_sha256(&salted, b"Client Key");
        Ok(Self {
            iterations,
            salt,
            stored_key: sha256(&client_key),
            server_key: hmac_sha256(&salted, b"Server Key"),
        })
    }

    /// A fresh random salt, as `createUser` makes one.
    pub fn generate(password: &str, iterations: u32) -> Result<Self, String> {
        let salt: [u8; 28] = rand::random();
        Self::new(password, salt.to_vec(), iterations)
    }

    pub fn to_document(&self) -> Document {
        doc! {
            "iterationCount": self.iterations as i32,
            "salt": STANDARD.encode(&self.salt),
            "storedKey": STANDARD.encode(self.stored_key),
            "serverKey": STANDARD.encode(self.server_key),
        }
    }

    pub fn from_document(document: &Document) -> Option<Self> {
        let key = |name: &str| -> Option<[u8; 32]> {
            STANDARD
                .decode(document.get_str(name).ok()?)
                .ok()?
                .try_into()
                .ok()
        };
        Some(Self {
            iterations: document.get_i32("iterationCount").ok()? as u32,
            salt: STANDARD.decode(document.get_str("salt").ok()?).ok()?,
            stored_key: key("storedKey")?,
            server_key: key("serverKey")?,
        })
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum ScramError {
    /// The client sent something that is not SCRAM; the conversation is over.
    Malformed(String),
    /// Unknown user or wrong proof: MongoDB answers both the same way.
    AuthenticationFailed,
}

/// A conversation between the server-first and the client-final message.
#[derive(Clone, Debug)]
pub struct Conversation {
    pub username: String,
    credential: Credential,
    gs2_header: String,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

fn attribute(part: &str, key: char) -> Result<&str, ScramError> {
    part.strip_prefix(key)
        .and_then(|rest| rest.strip_prefix('='))
        .ok_or_else(|| ScramError::Malformed(format!("expected attribute {key} in {part:?}")))
}

/// The user name a client-first message names (`=2C` and `=3D` decoded), before any lookup.
pub fn client_first_user(payload: &[u8]) -> Result<String, ScramError> {
    let message = std::str::from_utf8(payload).map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
    let (_, bare) = split_client_first(message)?;
    let user = attribute(bare.split(',').next().unwrap_or_default(), 'n')?;
    Ok(user.replace("=2C", ",").replace("=3D", "="))
}

fn split_client_first(message: &str) -> Result<(&str, &str), ScramError> {
    let mut parts = message.splitn(3, ',');
    let binding = parts.next().unwrap_or_default();
    let authzid = parts
        .next()
        .ok_or_else(|| ScramError::Malformed("no GS2 header".into()))?;
    let bare = parts
        .next()
        .ok_or_else(|| ScramError::Malformed("no client-first-bare".into()))?;
    match binding {
        "n" | "y" => {}
        _ => return Err(ScramError::Malformed("channel binding is not supported".into())),
    }
    if !authzid.is_empty() {
        return Err(ScramError::Malformed(
            "authorization identities are not supported".into(),
        ));
    }
    let header_len = binding.len() + authzid.len() + 2;
    Ok((&message[..header_len], bare))
}

impl Conversation {
    /// Answers a client-first message with the server-first one, for `credential` (looked up
    /// from [`client_first_user`]).
    pub fn start(payload: &[u8], credential: Credential) -> Result<(Self, Vec<u8>), ScramError> {
        let server_nonce = STANDARD.encode(rand::random::<[u8; 24]>());
        Self::start_with_nonce(payload, credential, &server_nonce)
    }

    pub fn start_with_nonce(
        payload: &[u8],
        credential: Credential,
        server_nonce: &str,
    ) -> Result<(Self, Vec<u8>), ScramError> {
        let message = std::str::from_utf8(payload).map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let (gs2_header, bare) = split_client_first(message)?;
        let mut attributes = bare.split(',');
        let username = attribute(attributes.next().unwrap_or_default(), 'n')?
            .replace("=2C", ",")
            .replace("=3D", "=");
        let client_nonce = attribute(attributes.next().unwrap_or_default(), 'r')?;
        if client_nonce.is_empty() {
            return Err(ScramError::Malformed("empty client nonce".into()));
        }
        let nonce = format!("{client_nonce}{server_nonce}");
        let server_first = format!(
            "r={nonce},s={},i={}",
            STANDARD.encode(&credential.salt),
            credential.iterations
        );
        let reply = server_first.clone().into_bytes();
        Ok((
            Self {
                username,
                credential,
                gs2_header: gs2_header.to_string(),
                client_first_bare: bare.to_string(),
                server_first,
                nonce,
            },
            reply,
        ))
    }

    /// Checks the client's proof and answers with the server signature.
    pub fn finish(&self, payload: &[u8]) -> Result<Vec<u8>, ScramError> {
        let message = std::str::from_utf8(payload).map_err(|_| ScramError::Malformed("not UTF-8".into()))?;
        let (without_proof, proof) = message
            .rsplit_once(",p=")
            .ok_or_else(|| ScramError::Malformed("client-final without proof".into()))?;
        let mut attributes = without_proof.split(',');
        let binding = attribute(attributes.next().unwrap_or_default(), 'c')?;
        let nonce = attribute(attributes.next().unwrap_or_default(), 'r')?;
        if binding != STANDARD.encode(&self.gs2_header) {
            return Err(ScramError::Malformed(
                "channel binding does not match the GS2 header".into(),
            ));
        }
        if nonce != self.nonce {
            return Err(ScramError::Malformed("nonce does not match".into()));
        }
        let proof: [u8; 32] = STANDARD
            .decode(proof)
            .ok()
            .and_then(|p| p.try_into().ok())
            .ok_or(ScramError::AuthenticationFailed)?;
        let auth_message = format!(
            "{},{},{}",
            self.client_first_bare, self.server_first, without_proof
        );
        let signature = hmac_sha256(&self.credential.stored_key, auth_message.as_bytes());
        let mut client_key = [0u8; 32];
        for (i, byte) in client_key.iter_mut().enumerate() {
            *byte = proof[i] ^ signature[i];
        }
        if sha256(&client_key) != self.credential.stored_key {
            return Err(ScramError::AuthenticationFailed);
        }
        let server_signature = hmac_sha256(&self.credential.server_key, auth_message.as_bytes());
        Ok(format!("v={}", STANDARD.encode(server_signature)).into_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The example exchange of RFC 7677 section 3.
    const CLIENT_FIRST: &str = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
    const SERVER_NONCE: &str = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
    const SERVER_FIRST: &str =
        "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
    const CLIENT_FINAL: &str = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,\
                                p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
    const SERVER_FINAL: &str = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

    fn pencil() -> Credential {
        Credential::new(
            "pencil",
            STANDARD.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap(),
            4096,
        )
        .unwrap()
    }

    #[test]
    fn hmac_matches_rfc_4231_case_2() {
        assert_eq!(
            hex::encode(hmac_sha256(b"Jefe", b"what do ya want for nothing?")),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn pbkdf2_matches_the_published_vector() {
        assert_eq!(
            hex::encode(pbkdf2_sha256(b"password", b"salt", 2)),
            "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43"
        );
    }

    #[test]
    fn rfc_7677_exchange() {
        assert_eq!(client_first_user(CLIENT_FIRST.as_bytes()).unwrap(), "user");
        let (conversation, server_first) =
            Conversation::start_with_nonce(CLIENT_FIRST.as_bytes(), pencil(), SERVER_NONCE).unwrap();
        assert_eq!(String::from_utf8(server_first).unwrap(), SERVER_FIRST);
        let server_final = conversation.finish(CLIENT_FINAL.as_bytes()).unwrap();
        assert_eq!(String::from_utf8(server_final).unwrap(), SERVER_FINAL);
    }

    #[test]
    fn a_wrong_password_fails_and_so_does_a_forged_nonce() {
        let wrong = Credential::new("pen", pencil().salt, 4096).unwrap();
        let (conversation, _) =
            Conversation::start_with_nonce(CLIENT_FIRST.as_bytes(), wrong, SERVER_NONCE).unwrap();
        assert_eq!(
            conversation.finish(CLIENT_FINAL.as_bytes()),
            Err(ScramError::AuthenticationFailed)
        );

        let (conversation, _) =
            Conversation::start_with_nonce(CLIENT_FIRST.as_bytes(), pencil(), "other-nonce").unwrap();
        assert!(matches!(
            conversation.finish(CLIENT_FINAL.as_bytes()),
            Err(ScramError::Malformed(_))
        ));
    }

    #[test]
    fn refuses_channel_binding_and_garbage() {
        for bad in [
            "p=tls-unique,,n=user,r=abc",
            "n,a=admin,n=user,r=abc",
            "hello",
            "n,,r=abc",
        ] {
            assert!(
                Conversation::start(bad.as_bytes(), pencil()).is_err(),
                "{bad} should be refused"
            );
        }
    }

    #[test]
    fn credentials_round_trip_through_their_document_and_escape_names() {
        let credential = pencil();
        assert_eq!(
            Credential::from_document(&credential.to_document()),
            Some(credential)
        );
        assert_eq!(client_first_user(b"n,,n=a=2Cb=3Dc,r=x").unwrap(), "a,b=c");
    }
}
